"""From a request's tokens to the text its caller sees: incremental detokenization,
stop conditions, and the pieces that are streamed.

A request's `text` grows a piece per token; stop strings are looked for in it and cut
it. Streaming holds back the text that could still become the start of a stop string,
so no streamed piece is ever taken back. Unstreamed requests without stop strings are
decoded once, at the end: decoding token by token is much of a small step's host time.
"""

from __future__ import annotations

from llm.requests import LLMRequest, Output
from llm.tokenizer import Tokenizer


def check_stop(req: LLMRequest, token: int, tokenizer: Tokenizer) -> str | None:
    """After `token` was appended to the output: the finish reason ("stop", "length")
    or None. On a stop, `req.text` is the final text."""
    p = req.params
    seen = len(req.text)
    if req.stream or p.stop:  # the text as it grows: pieces to stream, stop strings to find
        detokenize(req, tokenizer)
    if not p.ignore_eos and token in tokenizer.eos_ids:
        req.output_ids.pop()  # the end marker is not part of the answer
        req.text = tokenizer.decode(req.output_ids)
        return "stop"
    for s in p.stop:
        cut = req.text.find(s, max(0, seen - len(s) + 1))  # one ending in the new text
        if cut >= 0:
            req.text = req.text[:cut]
            return "stop"
    if len(req.output_ids) >= p.max_tokens:
        req.text = tokenizer.decode(req.output_ids)  # with any character still incomplete
        return "length"
    return None


def detokenize(req: LLMRequest, tokenizer: Tokenizer) -> None:
    """Appends the new token's text, decoding only the tokens since the last piece
    (decoding the whole output at every token is quadratic in its length). The
    previous piece's tokens are decoded with it, so a decoder that depends on the
    token before (a word-start marker, a multi-byte character) comes out the same as
    decoding everything; a trailing incomplete character waits for the next token."""
    ids = req.output_ids
    before = tokenizer.decode(ids[req.prefix_offset:req.read_offset])
    after = tokenizer.decode(ids[req.prefix_offset:])
    if len(after) > len(before) and not after.endswith("\ufffd"):
        req.text += after[len(before):]
        req.prefix_offset, req.read_offset = req.read_offset, len(ids)


def stream_text(req: LLMRequest, final: str | None = None) -> None:
    """Puts the text not yet sent on the request's output queue; `final`, the finish
    reason, sends the rest (and the error, if any) as the last piece."""
    # hold back text that could be the start of a stop string
    hold = 0 if final else max((len(s) - 1 for s in req.params.stop), default=0)
    upto = max(req.sent, len(req.text) - hold)
    if final is None and upto <= req.sent:
        return
    piece = req.text[req.sent:upto]
    req.sent = upto
    req.outputs.put(Output(piece, [], final, req.error if final else None))
    if req.waker is not None:
        req.waker()
