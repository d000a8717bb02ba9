"""What the LLM is asked: a caption of a window's facts, and an answer from an exact
aggregate. A chat model (a checkpoint with a chat template, such as SmolLM2-Instruct) gets
an instruction and the facts as a conversation, the instruction first so that every
request shares it (a prefix the KV cache keeps); scene-lm, trained here on its own terse
prompts (llm/facts.py), gets those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llm.facts import Aggregate, SceneFacts, answer_prompt, answer_text, caption_prompt, caption_text, facts_text

if TYPE_CHECKING:
    from llm.tokenizer import Tokenizer

CAPTION_INSTRUCTION = (
    "You write captions for a fixed street camera. Each message gives the facts of one time window: the "
    "objects in view at its end by class, the crossings of each counting line by class and direction, and the "
    "tracks that arrived and left. Describe the window in one or two plain sentences, using only these facts. "
    "Never state a count, a line or a direction the facts do not give.")
ANSWER_INSTRUCTION = (
    "You answer questions about what a fixed street camera saw. Each message gives the exact result, computed "
    "from the camera's records, then the question. Answer in one short sentence that states that result: the "
    "same figure or time, the same line or zone, the same direction. Add nothing else.")


def _facts(objects: dict, crossings: dict, entered: dict, left: dict) -> SceneFacts:
    return SceneFacts("example", 0.0, 10_000.0, objects, crossings, entered, left)


CAPTION_EXAMPLES = (
    _facts({"person": 3, "car": 1}, {"gate": {"person": {"in": 2, "out": 0}}}, {"person": 2}, {"car": 1}),
    _facts({"car": 12}, {}, {}, {"bike": 1}),
    _facts({}, {}, {}, {}),
)


def caption_messages(f: SceneFacts, shots: bool = True) -> list[dict]:
    """The conversation asking for `f`'s caption; `shots`: with the worked examples (a
    model without the scene adapter needs them, one trained with it was trained without)."""
    turns = [m for e in CAPTION_EXAMPLES for m in ({"role": "user", "content": facts_text(e)},
                                                   {"role": "assistant", "content": caption_text(e)})] if shots else []
    return [{"role": "system", "content": CAPTION_INSTRUCTION}, *turns, {"role": "user", "content": facts_text(f)}]


# Worked examples before the request, as turns of the conversation: a small model follows
# what it has seen answered more reliably than what it is told.
ANSWER_EXAMPLES = (
    (Aggregate("count", "car", 10_000, 40_000, line="gate", direction="in", n=3),
     "how many cars came in through gate between 0:10 and 0:40?"),
    (Aggregate("first", "person", t_ms=7_000), "when did the first person show up?"),
    (Aggregate("zone", "bike", 0, 30_000, zone="yard", n=0), "was there a bike in yard before 0:30?"),
)


def answer_user(agg: Aggregate, question: str) -> str:
    return f"Result: {answer_text(agg)}\nQuestion: {question}"


def answer_messages(agg: Aggregate, question: str, shots: bool = True) -> list[dict]:
    turns = [m for a, q in ANSWER_EXAMPLES for m in ({"role": "user", "content": answer_user(a, q)},
                                                     {"role": "assistant", "content": answer_text(a)})] if shots else []
    return [{"role": "system", "content": ANSWER_INSTRUCTION}, *turns,
            {"role": "user", "content": answer_user(agg, question)}]


def caption_request(tokenizer: "Tokenizer", f: SceneFacts, tuned: bool = False) -> str | list[int]:
    """A caption request's prompt: chat ids for a chat model (`tuned`: one with the scene
    adapter merged, asked as it was trained), else scene-lm's prompt text."""
    return tokenizer.chat(caption_messages(f, shots=not tuned)) if tokenizer.chat_template else caption_prompt(f)


def answer_request(tokenizer: "Tokenizer", agg: Aggregate, question: str, tuned: bool = False) -> str | list[int]:
    return tokenizer.chat(answer_messages(agg, question, shots=not tuned)) if tokenizer.chat_template else \
        answer_prompt(agg.context(), question)
