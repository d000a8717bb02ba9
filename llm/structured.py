"""Structured outputs: a request's output held to a JSON schema, any JSON object, a
regular expression, one of a list of choices, or an EBNF grammar (xgrammar, vLLM's
default backend).

A `Constraint` is the request's spec, checked against the limits here (size, nesting,
recursive references) before anything compiles. `Grammars` compiles each spec once for
the engine's tokenizer and keeps it (least recently used goes first): compiling runs on
the caller's thread when the request is added, never in the step loop. Each
constrained request holds a `GrammarState` (an xgrammar matcher): before its token is
sampled the engine masks the tokens the grammar forbids, in its own row of the batch's
logits only, and the scheduler feeds it the token sampled. Where the grammar allows
one continuation only (a schema's keys and punctuation), `forced` gives its tokens, which
join the output without a forward pass each (SGLang's jump-forward decoding); the last
of them is left to the model, which may tokenize what follows it together with it.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from llm.tokenizer import Tokenizer

KINDS = ("json_schema", "json_object", "regex", "choice", "grammar")
MAX_SPEC_CHARS = 16_384  # a schema, regex or grammar, as text
MAX_DEPTH = 12  # nesting of a schema's objects and arrays
MAX_CHOICES = 64
MAX_CHOICE_CHARS = 256
MAX_COMPILED = 64  # grammars kept compiled per engine


class ConstraintError(ValueError):
    """A constraint that is malformed, over the limits, or that the backend cannot compile;
    the message names the problem."""


class Unsatisfiable(ValueError):
    """A grammar that allows no token of the model's vocabulary next (it asks for characters
    the vocabulary cannot write): the request's mistake, found while it runs."""


UNSATISFIABLE = "unsatisfiable"  # the finish reason of a request whose grammar its model cannot follow


@dataclass(frozen=True)
class Constraint:
    kind: str
    spec: str = ""  # JSON for a schema (its key order kept: it is the output's) or the choices; the regex or grammar

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConstraintError(f"structured output: kind must be one of {', '.join(KINDS)}; was {self.kind!r}")
        if len(self.spec) > MAX_SPEC_CHARS:
            raise ConstraintError(f"structured output: the {self.kind.replace('_', ' ')} is {len(self.spec)} "
                                  f"characters; at most {MAX_SPEC_CHARS}")

    @classmethod
    def json_schema(cls, schema: Any) -> "Constraint":
        if not isinstance(schema, dict):
            raise ConstraintError(f"json_schema: a schema is a JSON object; was {type(schema).__name__}")
        depth = _depth(schema)
        if depth > MAX_DEPTH:
            raise ConstraintError(f"json_schema: nested {depth} deep; at most {MAX_DEPTH}")
        cycle = _recursive_ref(schema)
        if cycle:
            raise ConstraintError(f"json_schema: recursive reference ({' -> '.join(cycle)}); recursive schemas "
                                  "are not supported")
        return cls("json_schema", json.dumps(_json_string_lengths(schema), separators=(",", ":")))

    @classmethod
    def json_object(cls) -> "Constraint":
        return cls("json_object")

    @classmethod
    def regex(cls, pattern: str) -> "Constraint":
        if not pattern:
            raise ConstraintError("regex: empty")
        return cls("regex", pattern)

    @classmethod
    def choice(cls, choices: list[str]) -> "Constraint":
        if not 1 <= len(choices) <= MAX_CHOICES:
            raise ConstraintError(f"choice: 1 to {MAX_CHOICES} choices; were {len(choices)}")
        for c in choices:
            if not isinstance(c, str) or not 1 <= len(c) <= MAX_CHOICE_CHARS:
                raise ConstraintError(f"choice: each choice is a string of 1 to {MAX_CHOICE_CHARS} characters; "
                                      f"{c!r} is not")
        return cls("choice", json.dumps(choices))

    @classmethod
    def grammar(cls, ebnf: str) -> "Constraint":
        if not ebnf.strip():
            raise ConstraintError("grammar: empty")
        return cls("grammar", ebnf)


# JSON's string characters: not a quote, a backslash or a control character (escapes aside)
JSON_CHARACTERS = '[^"\\\\\\u0000-\\u001f]'


def _json_string_lengths(node: Any) -> Any:
    """The schema with each length-bounded string (minLength, maxLength) written as the
    equivalent pattern: xgrammar 0.2.8 compiles such a string to characters that admit
    raw control characters, which JSON forbids, and its patterns are JSON-safe."""
    if isinstance(node, list):
        return [_json_string_lengths(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _json_string_lengths(v) for k, v in node.items()}
    bounded = "minLength" in node or "maxLength" in node
    if node.get("type") == "string" and bounded and not {"pattern", "format", "enum", "const"} & node.keys():
        low, high = node.get("minLength", 0), node.get("maxLength", "")
        if isinstance(low, int) and (high == "" or isinstance(high, int)):
            out["pattern"] = f"^{JSON_CHARACTERS}{{{low},{high}}}$"
            out.pop("minLength", None)
            out.pop("maxLength", None)
    return out


def _depth(node: Any) -> int:
    if isinstance(node, dict):
        return 1 + max((_depth(v) for v in node.values()), default=0)
    if isinstance(node, list):
        return 1 + max((_depth(v) for v in node), default=0)
    return 0


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for k, v in node.items() if k not in ("$defs", "definitions")))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def _recursive_ref(schema: dict) -> list[str]:
    """A cycle of local references (#, #/$defs/X, #/definitions/X), or []."""
    defs = {f"#/{where}/{name}": body for where in ("$defs", "definitions")
            if isinstance(schema.get(where), dict) for name, body in schema[where].items()}
    edges = {ref: _refs(body) for ref, body in defs.items()}
    edges["#"] = _refs(schema)
    path: list[str] = []

    def visit(ref: str, seen: frozenset) -> list[str]:
        for nxt in sorted(edges.get(ref, ())):
            if nxt in seen or nxt == "#":
                return [*path, ref, nxt]
            if nxt in edges:
                path.append(ref)
                found = visit(nxt, seen | {nxt})
                path.pop()
                if found:
                    return found
        return []

    return visit("#", frozenset({"#"}))


class GrammarState:
    """One request's place in its grammar."""

    def __init__(self, matcher) -> None:
        self.matcher = matcher

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        """Its allowed tokens into `bitmask[row]`; Unsatisfiable when there are none."""
        self.matcher.fill_next_token_bitmask(bitmask, row)
        if not bool(bitmask[row].any()):
            raise Unsatisfiable("structured output: the grammar allows no token of the model's vocabulary here "
                                "(it asks for characters the model cannot write)")

    def accept(self, token: int) -> bool:
        return bool(self.matcher.accept_token(token))

    @property
    def terminated(self) -> bool:
        return bool(self.matcher.is_terminated())

    def forced(self, tokenizer: "Tokenizer", most: int) -> list[int]:
        """The tokens of what the grammar allows alone from here, accepted, at most
        `most`, the last of them left to the model."""
        try:
            text = self.matcher.find_jump_forward_string()
        except UnicodeDecodeError:  # the forced bytes end inside a character: let the model write it
            return []
        if not text or most < 1:
            return []
        taken = []
        for token in tokenizer.encode_rendered(text)[:-1][:most]:
            if not self.matcher.accept_token(token):
                break
            taken.append(token)
        return taken


class Grammars:
    """The engine's compiled grammars, by constraint, for its tokenizer and vocabulary."""

    def __init__(self, tokenizer: "Tokenizer", vocab_size: int, max_compiled: int = MAX_COMPILED) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.max_compiled = max_compiled
        self._compiler = None
        self._compiled: OrderedDict[Constraint, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.compiles = 0  # grammars compiled (a cache miss each)

    def state(self, constraint: Constraint) -> GrammarState:
        import xgrammar as xgr

        stops = list(self.tokenizer.eos_ids)
        return GrammarState(xgr.GrammarMatcher(self.compiled(constraint), override_stop_tokens=stops or None,
                                               terminate_without_stop_token=not stops))

    def compiled(self, constraint: Constraint):
        with self._lock:
            found = self._compiled.get(constraint)
            if found is not None:
                self._compiled.move_to_end(constraint)
                return found
            compiler = self._compiler = self._compiler or self._new_compiler()
        grammar = _compile(compiler, constraint)  # outside the lock: a slow one does not hold up the rest
        with self._lock:
            self.compiles += 1
            self._compiled[constraint] = grammar
            while len(self._compiled) > self.max_compiled:
                self._compiled.popitem(last=False)
        return grammar

    def bitmask(self, rows: int) -> torch.Tensor:
        import xgrammar as xgr

        return xgr.allocate_token_bitmask(rows, self.vocab_size)

    def _new_compiler(self):
        import xgrammar as xgr

        hf = self.tokenizer.hf
        vocab = hf.get_vocab(with_added_tokens=True)
        encoded = [""] * self.vocab_size  # ids past the tokenizer's (a padded embedding) are never allowed
        for text, i in vocab.items():
            if i < self.vocab_size:
                encoded[i] = text
        meta = xgr.TokenizerInfo._detect_metadata_from_hf(hf.to_str())
        info = xgr.TokenizerInfo(encoded, meta["vocab_type"], vocab_size=self.vocab_size,
                                 stop_token_ids=list(self.tokenizer.eos_ids) or None,
                                 add_prefix_space=meta["add_prefix_space"])
        return xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)


def _compile(compiler, c: Constraint):
    try:
        if c.kind == "json_schema":
            return compiler.compile_json_schema(c.spec, any_whitespace=False, strict_mode=True)
        if c.kind == "json_object":  # an object, as OpenAI's JSON mode promises (the built-in grammar is any value)
            return compiler.compile_json_schema('{"type": "object"}', any_whitespace=False, strict_mode=False)
        if c.kind == "regex":
            return compiler.compile_regex(c.spec)
        if c.kind == "choice":
            return compiler.compile_grammar("root ::= " + " | ".join(json.dumps(x, ensure_ascii=False)
                                                                     for x in json.loads(c.spec)))
        return compiler.compile_grammar(c.spec)
    except Exception as exc:  # the backend's verdict on a user's spec, whatever its type: never a 500
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        if "] " in reason and reason.startswith("["):  # xgrammar's "[time] file.cc:line: " prefix
            reason = reason.split(": ", 1)[-1]
        raise ConstraintError(f"{c.kind}: cannot be compiled: {reason}") from None
