"""NVIDIA Triton serving one repository model with its own dynamic batcher: the peer
`vigil bench engine` measures beside Vigil (bench/triton_peer.py starts this).

Runs in the Triton venv (`make triton-venv`: Debian's /usr/bin/python3, whose
libpython the Triton Python backend stub links, with the `nvidia-pytriton` wheel, which
ships the Triton server). The model is built from the same model.yaml and weights by
Vigil's own loader, and a batch runs the way the Ray Serve peer runs one:
`LoadedModel.infer` on the stacked frames (preprocessing included).

    python -m bench.triton_server FOLDER --http-port P --max-batch 8 --delay-us 5000
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

MODEL_NAME = "m0"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a model version folder (ROOT/NAME/VERSION)")
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, required=True)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--delay-us", type=int, default=5000, help="max_queue_delay_microseconds")
    parser.add_argument("--preferred", type=int, nargs="*", default=None, help="preferred batch sizes")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)

    import torch
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    from models.registry import load_model
    from models.repository import ModelRepository

    logging.basicConfig(level=logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)
    root, name, version = args.folder.parent.parent, args.folder.parent.name, int(args.folder.name)
    repo = ModelRepository(root)
    model = load_model(repo.spec(name, version), repo.folder(name, version), version, "cpu")

    @batch
    def infer(frames: np.ndarray) -> dict[str, np.ndarray]:
        out = model.infer(frames)
        return {"head": np.stack([o["head"].probs for o in out])}

    config = TritonConfig(http_address="127.0.0.1", http_port=args.http_port, grpc_address="127.0.0.1",
                          grpc_port=args.grpc_port, metrics_port=args.metrics_port, log_verbose=0)
    batcher = DynamicBatcher(max_queue_delay_microseconds=args.delay_us, preferred_batch_size=args.preferred)
    with Triton(config=config) as triton:
        triton.bind(model_name=MODEL_NAME, infer_func=infer,
                    inputs=[Tensor(name="frames", dtype=np.uint8, shape=(-1, -1, 3))],
                    outputs=[Tensor(name="head", dtype=np.float32, shape=(-1,))],
                    config=ModelConfig(max_batch_size=args.max_batch, batcher=batcher))
        triton.serve()


if __name__ == "__main__":
    main()
