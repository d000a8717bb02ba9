"""Structured outputs (llm/structured.py): every sampled output of a random model held to
five schemas parses and validates (jsonschema; `vigil bench llm-features` runs 1,000); on SmolLM2, a schema that admits the
model's own greedy output leaves its tokens as they were, and jump-forward decoding
takes fewer forward passes than tokens; unconstrained requests in the same batch are
untouched; grammars compile once per spec; what cannot be compiled, or is over the
limits, is refused by name."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest
from tiny import make_tiny_llama

from bench.llm_features import SCHEMAS
from llm.checkpoint import load_model
from llm.engine import EngineConfig, LLMEngine
from llm.sampling import SamplingParams
from llm.serving import load_llm
from llm.structured import MAX_DEPTH, Constraint, ConstraintError
from llm.tokenizer import Tokenizer
from support.processes import ROOT

SMOLLM2 = ROOT / "configs" / "models" / "smollm2-135m-instruct" / "1" / "SmolLM2-135M-Instruct.Q4_1.gguf"

@pytest.fixture(scope="module")
def smollm2_engine():
    if not SMOLLM2.is_file():
        pytest.fail(f"{SMOLLM2} is not installed: run `vigil models fetch` (make install does)")
    engine = load_llm(ROOT / "configs" / "models", "smollm2-135m-instruct", adapters=False)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def random_engine(tmp_path_factory, smollm2_engine):
    """A random tiny Llama over SmolLM2's whole vocabulary and tokenizer: sampled at
    temperature 1 it wanders everywhere a grammar allows."""
    folder = make_tiny_llama(tmp_path_factory.mktemp("random-49k"), seed=7, vocab=49152, hidden=32, layers=1)
    smollm2_engine.tokenizer.hf.save(str(folder / "tokenizer.json"))
    return LLMEngine(load_model(folder), Tokenizer(folder, eos_ids=(2,)), EngineConfig(num_blocks=2048, block_size=16))


def run(engine: LLMEngine, requests: list[tuple[str, SamplingParams]]):
    handles = [engine.add_request(p, params) for p, params in requests]
    while engine.has_work():
        engine.step()
    return handles


def test_sampled_outputs_of_five_schemas_all_parse_and_validate(random_engine):
    rng = random.Random(3)
    requests = []
    for k in range(250):
        schema = SCHEMAS[k % len(SCHEMAS)]
        prompt = " ".join(rng.choice(["camera", "door", "{", "7", "car", "the"]) for _ in range(rng.randint(2, 9)))
        requests.append((prompt, SamplingParams(max_tokens=160, temperature=1.0, seed=k,
                                                constraint=Constraint.json_schema(schema))))
    handles = run(random_engine, requests)
    outputs = set()
    for k, h in enumerate(handles):
        out = h.result(5)
        assert out.finish_reason == "stop", (k, out.text)
        jsonschema.validate(json.loads(out.text), SCHEMAS[k % len(SCHEMAS)])
        outputs.add(out.text)
    assert len(outputs) > 150  # sampled, not one answer repeated (a few short ones recur)
    assert random_engine.grammars.compiles == len(SCHEMAS)  # each compiled once, then cached


PROMPTS = ['Q: Give a person as JSON.\nA:\n{"name": "Bob", "age": 30}\nQ: Give another person as JSON.\nA:\n',
           'Q: A camera saw 3 people.\nA:\n{"kind": "person", "count": 3}\nQ: A camera saw 2 cars.\nA:\n']
ADMITTING = [{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]},
             {"type": "object", "properties": {"kind": {"enum": ["person", "car"]}, "count": {"type": "integer"}},
              "required": ["kind", "count"]}]


def test_a_schema_that_admits_the_greedy_output_keeps_its_tokens_in_fewer_passes(smollm2_engine):
    """SmolLM2 writes one JSON line greedily; held to a schema that admits that line, its
    tokens are the same, and the keys and punctuation the schema fixes join without a
    forward pass each. Unconstrained requests in the same batch keep their tokens."""
    engine = smollm2_engine
    alone = run(engine, [(p, SamplingParams(max_tokens=24)) for p in PROMPTS])
    mixed = run(engine, [r for p, s in zip(PROMPTS, ADMITTING)
                         for r in ((p, SamplingParams(max_tokens=24)),
                                   (p, SamplingParams(max_tokens=24, constraint=Constraint.json_schema(s))))])
    for k, free in enumerate(alone):
        untouched, held = mixed[2 * k], mixed[2 * k + 1]
        assert untouched.request.output_ids == free.request.output_ids
        line = free.result(5).text.split("\n")[0]
        assert held.result(5).text == line and json.loads(line)
        assert held.request.output_ids == free.request.output_ids[:len(held.request.output_ids)]
        assert held.request.num_forced >= 5
    for prompt, schema in zip(PROMPTS, ADMITTING):  # alone, a step is a forward pass
        before = engine.num_steps
        held = run(engine, [(prompt, SamplingParams(max_tokens=24, constraint=Constraint.json_schema(schema)))])[0]
        tokens = len(held.request.output_ids) + 1  # and the end of text it samples
        assert engine.num_steps - before <= 0.6 * tokens, (engine.num_steps - before, tokens)


def test_regex_choice_json_object_and_grammar_hold(smollm2_engine):
    engine = smollm2_engine
    chat = engine.tokenizer.chat([{"role": "user", "content": "What colour is the sky on a clear day?"}])
    kinds = [Constraint.regex(r"(red|blue|green) [a-z]{2,8}"), Constraint.choice(["blue", "grey", "it depends"]),
             Constraint.json_object(), Constraint.grammar('root ::= "The sky is " ("blue" | "grey") "."')]
    handles = run(engine, [(chat, SamplingParams(max_tokens=48, constraint=c)) for c in kinds])
    outs = [h.result(5) for h in handles]
    texts = [out.text for out in outs]
    assert re.fullmatch(r"(red|blue|green) [a-z]{2,8}", texts[0]), texts[0]
    assert texts[1] in ("blue", "grey", "it depends")
    assert outs[2].finish_reason == "length" or isinstance(json.loads(texts[2]), dict), texts[2]
    assert texts[3] in ("The sky is blue.", "The sky is grey."), texts[3]


def test_what_cannot_be_compiled_or_is_over_the_limits_is_refused_by_name(smollm2_engine):
    engine = smollm2_engine

    def deep(n: int) -> dict:
        return {"type": "string"} if n == 0 else {"type": "object", "properties": {"a": deep(n - 1)}}

    cases = [
        (lambda: Constraint.json_schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/nope"}}}),
         r"json_schema: cannot be compiled: .*\$defs"),
        (lambda: Constraint.regex("(ab"), r"regex: cannot be compiled: .*parenthesis is not closed"),
        (lambda: Constraint.grammar("root ::= missing"), r"grammar: cannot be compiled"),
    ]
    for make, message in cases:
        with pytest.raises(ConstraintError, match=message):
            engine.add_request("x", SamplingParams(constraint=make()))
    with pytest.raises(ConstraintError, match=rf"nested \d+ deep; at most {MAX_DEPTH}"):
        Constraint.json_schema(deep(MAX_DEPTH))
    with pytest.raises(ConstraintError, match=r"recursive reference \(# -> #/\$defs/node -> #/\$defs/node\)"):
        Constraint.json_schema({"$ref": "#/$defs/node", "$defs": {"node": {
            "type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}}})
    with pytest.raises(ConstraintError, match=r"at most 16384"):
        Constraint.json_schema({"enum": ["x" * 100] * 200})
    with pytest.raises(ConstraintError, match=r"1 to 64 choices"):
        Constraint.choice([])
    with pytest.raises(ValueError, match=r"ignore_eos cannot be combined"):
        SamplingParams(ignore_eos=True, constraint=Constraint.json_object())
    assert not engine.has_work()  # nothing was admitted


def test_a_grammar_the_vocabulary_cannot_follow_fails_that_request_alone(tmp_path, smollm2_engine):
    """A word-level model cannot write "é": its request ends `unsatisfiable` with the
    reason, while the one beside it runs on. A choice whose forced bytes end inside a
    character (a non-BMP one) is written by SmolLM2 without jump-forward there."""
    folder = make_tiny_llama(tmp_path / "words")
    engine = LLMEngine(load_model(folder), Tokenizer(folder, eos_ids=(96,)), EngineConfig(num_blocks=64, block_size=4))
    bad, good = run(engine, [("t1 t2", SamplingParams(max_tokens=4, constraint=Constraint.choice(["é"]))),
                             ("t1 t2", SamplingParams(max_tokens=4, ignore_eos=True))])
    out = bad.result(5)
    assert out.finish_reason == "unsatisfiable" and "allows no token" in out.error
    assert good.result(5).finish_reason == "length"
    wide = "\U000286bf\U000286c0"
    held = run(smollm2_engine, [("Write it:", SamplingParams(max_tokens=16, constraint=Constraint.choice([wide])))])
    assert held[0].result(5).text == wide
