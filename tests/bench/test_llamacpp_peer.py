"""`vigil bench llm --peer llamacpp`: the server's command, the missing package's one line,
the streaming client against a stand-in server, and (when llama-cpp-python is installed)
the real server on SmolLM2's GGUF file with the workload's own prompts."""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench import llamacpp_peer
from bench.llamacpp_peer import (BAN, LlamaCppServer, PeerMissing, check_prompts, control_token_bias,
                                 require_llamacpp, run_llamacpp, server_command, stream_completion)
from bench.llm import PEER_RATIOS, Job, LLMBenchOptions, format_llm_report, measure, workload
from support.processes import ROOT

SMOLLM2 = ROOT / "configs" / "models" / "smollm2-135m-instruct" / "1"
GGUF = SMOLLM2 / "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf() -> Path:
    if not GGUF.is_file():
        pytest.fail(f"{SMOLLM2}: run `vigil models fetch` (make install does)")
    return GGUF


def test_the_server_runs_on_the_file_with_vigils_threads_and_without_interrupts():
    cmd = server_command(Path("/m/model.gguf"), 8123, 3, 2048, python="py")
    assert cmd[:3] == ["py", "-m", "llama_cpp.server"]
    args = dict(zip(cmd[3::2], cmd[4::2]))
    assert args == {"--model": "/m/model.gguf", "--host": "127.0.0.1", "--port": "8123", "--n_threads": "3",
                    "--n_threads_batch": "3", "--n_ctx": "2048", "--interrupt_requests": "false"}


def test_a_missing_package_is_one_line_naming_the_make_target(monkeypatch, capsys):
    from bench.cli import _run
    from cli.main import build_parser

    monkeypatch.setattr(llamacpp_peer.importlib.util, "find_spec",
                        lambda name: None if name == "llama_cpp" else object())
    with pytest.raises(PeerMissing, match="make llamacpp"):
        require_llamacpp()
    args = build_parser().parse_args(["bench", "llm", "--peer", "llamacpp", "--llm", "smollm2-135m-instruct"])
    assert _run(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`make llamacpp`" in err and "llama_cpp" in err


def test_an_unknown_peer_is_refused_by_name():
    with pytest.raises(ValueError, match="'vllm'"):
        LLMBenchOptions(peer="vllm")


def test_every_control_token_is_banned_the_end_of_generation_ones_among_them():
    bias = control_token_bias(gguf())
    assert {"0", "1", "2"} <= set(bias) and set(bias.values()) == {BAN}  # <|endoftext|>, <|im_start|>, <|im_end|>
    assert len(bias) == 17  # SmolLM2's special tokens, and no ordinary one


def sse(chunks: list[dict]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks) + b"data: [DONE]\r\n\r\n"


@contextmanager
def stand_in(finish: str = "length"):
    """A server that answers every completion with a stream of its max_tokens one-token chunks."""
    bodies = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            chunks = [{"choices": [{"text": "a", "finish_reason": None}]}] * body["max_tokens"]
            payload = b": ping\r\n\r\n" + sse(chunks + [{"choices": [{"text": "", "finish_reason": finish}]}])
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], bodies
    finally:
        httpd.shutdown()
        httpd.server_close()


class Fake:
    """What run_llamacpp needs of a LlamaCppServer."""

    def __init__(self, port: int, n_ctx: int = 2048) -> None:
        self.host, self.port, self.n_ctx, self.log_path = "127.0.0.1", port, n_ctx, Path("server.log")


def test_the_client_streams_every_job_at_its_arrival_and_counts_its_tokens():
    jobs = [Job(0.0, [1, 2, 3], 5), Job(0.05, [1, 4], 8)]
    with stand_in() as (port, bodies):
        s = stream_completion("127.0.0.1", port, {"prompt": "x", "max_tokens": 4, "stream": True})
        assert s.num_chunks == 4 and s.finish_reason == "length" and s.sent_s <= s.first_s <= s.last_s
        latencies, makespan, tokens, firsts = run_llamacpp(Fake(port), jobs, lambda ids: str(ids), {"2": BAN})
    assert tokens == 13 and makespan >= 0.05 and len(latencies) == 2
    assert all(0 < f <= lat for f, lat in zip(firsts, latencies))
    sent = sorted(bodies[1:], key=lambda b: b["max_tokens"])
    assert [(b["prompt"], b["max_tokens"], b["logit_bias"], b["temperature"], b["stream"]) for b in sent] == \
        [("[1, 2, 3]", 5, {"2": BAN}, 0.0, True), ("[1, 4]", 8, {"2": BAN}, 0.0, True)]


def test_a_request_that_stops_before_its_length_fails_the_trial():
    with stand_in(finish="stop") as (port, _), pytest.raises(RuntimeError, match="'stop' before its 5 tokens"):
        run_llamacpp(Fake(port), [Job(0.0, [1], 5)], str, {})
    with pytest.raises(ValueError, match="n_ctx 8"):
        run_llamacpp(Fake(1, n_ctx=8), [Job(0.0, [1, 2, 3], 6)], str, {})


def test_the_report_names_the_peer_and_both_decode_rates():
    best = {"rate_per_s": 1.0, "requests": 16, "p99_s": 2.0, "tps": 50.0, "mean_ttft_s": 0.1}
    r = {"model": "m", "p99_bound_s": 4.0, "prompt_tokens": [280, 350], "output_tokens": [8, 256], "peer": "llamacpp",
         "systems": {"vigil": {"best": best, "trials": []}, "llamacpp": {"best": None, "trials": []}},
         "ratio_vs_llamacpp": None, "decode_tokens_per_s": {"vigil": 30.0, "llamacpp": 60.0},
         "decode_ratio_vs_llamacpp": 0.5}
    text = format_llm_report(r)
    assert "llamacpp" in text and "ratio_vs_llamacpp None" in text
    assert "vigil 30.0 tokens/s, llamacpp 60.0 tokens/s (decode_ratio_vs_llamacpp 0.5)" in text


class Words:
    """A tokenizer without a chat template: a prompt's words are its ids."""
    chat_template = None

    def encode(self, text: str) -> list[int]:
        return [len(w) for w in text.split()]


def system(capacity: float, alone_s: float, first_s: float):
    """A made-up system: one request alone takes `alone_s`, its first token `first_s`; a
    trial keeps p99 at 1 s up to `capacity` requests/s, and its tokens/s follow the rate."""
    def run(jobs: list[Job]) -> tuple:
        if len(jobs) == 1:
            return [alone_s], alone_s, jobs[0].num_out, [first_s]
        rate = len(jobs) / jobs[-1].arrival_s
        p99 = 1.0 if rate <= capacity * 1.05 else 99.0
        return [p99] * len(jobs), 10.0 / rate, 100, [0.1] * len(jobs)
    return run


def test_a_peer_run_reports_goodput_at_equal_p99_and_both_decode_rates():
    systems = {"vigil": system(4.0, alone_s=2.56, first_s=0.01), "llamacpp": system(2.0, alone_s=1.28, first_s=0.005)}
    out = measure(systems, Words(), LLMBenchOptions(quick=True), lambda m: None, PEER_RATIOS, {"peer": "llamacpp"})
    assert out["p99_bound_s"] == pytest.approx(4 * 2.56)
    assert out["decode_tokens_per_s"] == {"vigil": pytest.approx(255 / 2.55, abs=0.1),
                                          "llamacpp": pytest.approx(255 / 1.275, abs=0.1)}
    assert out["decode_ratio_vs_llamacpp"] == 0.5
    assert [t["rate_per_s"] for t in out["systems"]["vigil"]["trials"]] == [0.8, 1.6, 3.2, 6.4]
    assert out["systems"]["llamacpp"]["best"]["rate_per_s"] == 1.6 and out["ratio_vs_llamacpp"] == 2.0
    assert "ttft_at_same_rate" not in out and "ratio_vs_hf_static" not in out


@pytest.mark.slow
def test_the_real_server_reads_vigils_prompts_and_generates_their_exact_lengths(tmp_path):
    try:
        require_llamacpp()
    except PeerMissing as exc:
        pytest.skip(str(exc))
    from llm.tokenizer import Tokenizer

    tok = Tokenizer(gguf())
    prompts = [j.prompt for j in workload(tok, 1.0, 2, LLMBenchOptions())]
    to_text = lambda ids: tok.hf.decode(ids, skip_special_tokens=False)  # noqa: E731 (as bench.llm's)
    with LlamaCppServer(gguf(), 2, 1024, log_dir=tmp_path) as server:
        check_prompts(server, prompts, to_text)
        with pytest.raises(RuntimeError, match="differently"):
            check_prompts(server, [prompts[0] + [2]], lambda ids: to_text(ids[:-1]))
        jobs = [Job(0.0, prompts[0], 6), Job(0.1, prompts[1], 9)]
        latencies, _, tokens, firsts = run_llamacpp(server, jobs, to_text, control_token_bias(gguf()))
        assert tokens == 15 and all(0 < f < lat for f, lat in zip(firsts, latencies))
    assert server._server.proc.poll() is not None
