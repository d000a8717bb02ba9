"""`vigil bench`: the benchmarks as a command of `vigil` (registered as an entry point
of group `vigil.commands`, so the runtime never imports the benchmarks)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vigil.allocator import CHOICES as ALLOCATORS
from vigil.provenance import Provenance
from vigil.report import print_json
from vigil.settings import MODELS_DIR


def register(sub) -> None:
    bench = sub.add_parser("bench", help="side-by-side benchmarks, reported as ratios",
                           description="Benchmarks that time Vigil against baselines in one run.")
    bench.add_argument("target", choices=["ingest", "runtime", "engine", "llm", "llm-features", "serve", "cluster"],
                       help="ingest: vigil run vs a plain decode+detect loop; runtime: a model through the engine "
                            "vs its network exported to ONNX and run by onnxruntime a frame at a time; engine: scheduling policies and peers; "
                            "llm: iteration-level vs static and request-level batching; llm-features: what "
                            "structured outputs and per-request LoRA adapters cost the LLM engine; serve: `vigil serve` with "
                            "1 to 16 cameras sharing a model, beside the engine alone; cluster: the scheduler, "
                            "backends and routers on a local Ray cluster of 4 nodes, Ray Serve on the same "
                            "workload, the real SceneDet on an engine backend, and `vigil serve --cluster` beside "
                            "`vigil serve` (--sim: only the placement planner at 16 to 1000 devices in a "
                            "simulation)")
    bench.add_argument("--json", type=Path, metavar="FILE", help="also write the result here")
    bench.add_argument("--source", default="sample_videos/street_a.mp4", help="clip to use")
    bench.add_argument("--detector", default=None,
                       help="ingest: detector for both sides (default scenedet); runtime: the model (default coco); "
                            "serve: the people counters' model, scenedet on the bundled clips (default) or coco on "
                            "vtest.avi")
    bench.add_argument("--repeats", type=int, default=3, help="alternating repeats; medians are reported")
    bench.add_argument("--max-frames", type=int, default=None, metavar="N",
                       help="frames per repeat (runtime: default 24)")
    bench.add_argument("--device", default="auto", help="auto | cpu | cuda (default: auto)")
    bench.add_argument("--quick", action="store_true", help="engine: shorter trials (under 5 minutes on 2 cores); "
                       "serve: N = 1, 4, 16 and shorter windows; cluster: a smoke run of every phase")
    bench.add_argument("--scenario", action="append", metavar="NAME",
                       help="engine: run only these (single, shared_backbone, overload, swap, selection, contended)")
    bench.add_argument("--no-ray", action="store_true", help="engine: skip the Ray Serve peer")
    bench.add_argument("--contended", action="store_true",
                       help="engine: run the contended scenario (single and shared_backbone beside busy processes, "
                            "profiles measured busy and served quiet, then the other way)")
    bench.add_argument("--hogs", type=int, default=None, metavar="N",
                       help="engine --contended: busy processes at nice 10 (default: one per core)")
    bench.add_argument("--sim", action="store_true", help="cluster: only simulate the placement planner (no Ray)")
    bench.add_argument("--arrivals", choices=["streams", "poisson"], default="streams",
                       help="cluster --sim: requests from video streams dealt by the routers' deficit round robin, "
                            "or an independent Poisson process per device (default: streams)")
    bench.add_argument("--sim-devices", type=int, nargs="+", default=[16, 100, 1000], metavar="N",
                       help="cluster: device counts to simulate (default: 16 100 1000)")
    bench.add_argument("--no-triton", action="store_true", help="engine: skip the Triton peer (it runs when "
                       "`make triton-venv` has made .triton-venv)")
    bench.add_argument("--models", "--models-dir", dest="models_dir", type=Path, default=MODELS_DIR,
                       metavar="DIR", help="llm: model repository holding scene-lm (default: configs/models)")
    bench.add_argument("--llm", default="scene-lm", metavar="NAME",
                       help="llm: the LLM of the repository to serve (default: scene-lm; smollm2-135m-instruct is "
                            "the GGUF instruct model set-up installs)")
    bench.add_argument("--trial-s", type=float, default=20.0, metavar="S",
                       help="llm: seconds of arrivals in each trial (default: 20)")
    bench.add_argument("--max-batch", type=int, default=32, metavar="N",
                       help="llm: most requests in a batch, the same for all three systems (default: 32)")
    bench.add_argument("--peer", choices=["llamacpp"], default=None,
                       help="llm: Vigil's engine against llama.cpp's OpenAI-compatible server (llama-cpp-python, "
                            "`make llamacpp`) on the same GGUF file and thread count, instead of the ablations: "
                            "throughput at equal p99 and the decode rate of one request alone")
    bench.add_argument("--allocator", nargs="+", default=["auto"], choices=list(ALLOCATORS), metavar="NAME",
                       help="serve: the server's allocator, one run of every N under each, side by side: "
                            f"{' | '.join(ALLOCATORS)} (default: auto)")
    bench.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    provenance = Provenance()
    result = _run(args)
    if isinstance(result, int):
        return result
    kind = "cluster-sim" if args.target == "cluster" and args.sim else \
        "llm-peer" if args.target == "llm" and args.peer else args.target
    print_json({"kind": kind, **result, "run": provenance.finish(result.get("device"))}, args.json)
    return 0


def _run(args: argparse.Namespace) -> dict | int:
    """The bench's result, or the exit status of a bench that could not run (said on stderr)."""
    if args.target == "ingest":
        from bench.ingest import IngestBenchOptions, run_ingest_bench

        try:
            result = run_ingest_bench(IngestBenchOptions(source=args.source, detector=args.detector or "scenedet",
                                                         repeats=args.repeats, max_frames=args.max_frames,
                                                         device=args.device))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    elif args.target == "runtime":
        from bench.runtime import RuntimeBenchOptions, format_runtime_report, run_runtime_bench
        from engine.device import resolve_device

        try:
            options = RuntimeBenchOptions(model=args.detector or "coco", frames=args.max_frames or 24,
                                          repeats=args.repeats, device=resolve_device(args.device),
                                          repository=args.models_dir)
            result = run_runtime_bench(options, log=lambda m: print(m, file=sys.stderr, flush=True))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(format_runtime_report(result), file=sys.stderr)
    elif args.target == "engine":
        from bench.engine import EngineBenchOptions, format_report, run_engine_bench
        from engine.device import resolve_device

        try:
            if args.contended:
                scenarios = (*(args.scenario or ()), "contended")
            elif args.scenario:
                scenarios = tuple(args.scenario)
            else:  # a quick run leaves out the contended scenario, which runs two of them again twice
                scenarios = tuple(s for s in EngineBenchOptions.scenarios if not (args.quick and s == "contended"))
            options = EngineBenchOptions(quick=args.quick, device=resolve_device(args.device), scenarios=scenarios,
                                         ray=not args.no_ray, triton=not args.no_triton,
                                         **({"hogs": args.hogs} if args.hogs is not None else {}))
            result = run_engine_bench(options, log=lambda m: print(m, file=sys.stderr, flush=True))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(format_report(result), file=sys.stderr)
    elif args.target == "llm":
        from bench.llamacpp_peer import PeerMissing
        from bench.llm import LLMBenchOptions, format_llm_report, run_llm_bench
        from engine.device import resolve_device

        try:
            if args.trial_s <= 0 or args.max_batch < 1:
                raise ValueError("--trial-s must be > 0 and --max-batch >= 1")
            # llama.cpp is built for the CPU: with --peer, auto means the CPU
            device = "cpu" if args.peer and args.device == "auto" else resolve_device(args.device)
            options = LLMBenchOptions(quick=args.quick, repository=args.models_dir, device=device,
                                      trial_s=args.trial_s, max_batch=args.max_batch, model=args.llm, peer=args.peer)
            result = run_llm_bench(options, log=lambda m: print(m, file=sys.stderr, flush=True))
        except PeerMissing as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except (ValueError, FileNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(format_llm_report(result), file=sys.stderr)
    elif args.target == "llm-features":
        from bench.llm_features import FeaturesBenchOptions, format_features_report, run_features_bench
        from engine.device import resolve_device

        llm = "smollm2-135m-instruct" if args.llm == "scene-lm" else args.llm  # scene-lm has no adapters
        try:
            options = FeaturesBenchOptions(quick=args.quick, repository=args.models_dir, model=llm,
                                           device=resolve_device(args.device), max_batch=args.max_batch,
                                           requests=args.max_batch,
                                           **({"structured_requests": 200, "out_tokens": 96} if args.quick else {}))
            result = run_features_bench(options, log=lambda m: print(m, file=sys.stderr, flush=True))
        except (ValueError, FileNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(format_features_report(result), file=sys.stderr)
    elif args.target == "serve":
        from bench.serve import ServeBenchOptions, format_serve_report, run_serve_bench
        from engine.device import resolve_device

        try:
            options = ServeBenchOptions(device=resolve_device(args.device), allocators=tuple(args.allocator),
                                        detector=args.detector or "scenedet",
                                        **({"counts": (1, 4, 16), "warmup_s": 10.0, "window_s": 20.0,
                                            "bound_s": 8.0} if args.quick else {}))
            result = run_serve_bench(options, log=lambda m: print(m, file=sys.stderr, flush=True))
        except (ValueError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(format_serve_report(result), file=sys.stderr)
    elif args.target == "cluster":
        try:
            if args.sim:
                from bench.cluster_sim import SimOptions, format_sim_report, run_sim

                options = SimOptions(devices=tuple(args.sim_devices), arrivals=args.arrivals,
                                     **({"seconds": 2.0} if args.quick else {}))
                result = run_sim(options, log=lambda m: print(m, file=sys.stderr, flush=True))
                print(format_sim_report(result), file=sys.stderr)
            else:
                from bench.cluster_ray import ClusterBenchOptions, format_cluster_report, run_cluster_bench

                # a smoke run of every phase; the figures worth keeping come from a full run
                # two nodes of two devices: three Ray processes to start, not five, which on two
                # busy cores is most of a smoke run's time
                quick = {"nodes": 2, "gpus_per_node": 2, "load_devices": 3.0, "steady_s": 5.0, "step_s": 6.0,
                         "failover_s": 6.0, "max_occupancy": (0.9,), "engine_s": 5.0, "serve_settle_s": 5.0,
                         "front_cameras": 2, "front_window_s": 5.0, "front_warmup_s": 5.0, "front_repeats": 1}
                options = ClusterBenchOptions(sim_devices=tuple(args.sim_devices), **(quick if args.quick else {}))
                result = run_cluster_bench(options, log=lambda m: print(m, file=sys.stderr, flush=True))
                print(format_cluster_report(result), file=sys.stderr)
        except ImportError as exc:
            print(f"error: the cluster bench needs Ray ({exc}); pip install 'ray>=2.40'", file=sys.stderr)
            return 2
        except (ValueError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    else:  # argparse restricts the choices
        raise AssertionError(args.target)
    return result
