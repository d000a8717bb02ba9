"""A torch root fragment takes the queued uint8 images and converts them inside its
trace (models/torch_input.py): the same numbers as converting first, in one call."""

import torch

from models.registry import load_model
from models.repository import ModelRepository
from models.torch_input import ImageInput
from repo import TINY_INPUT, write_model

BATCH = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def test_the_conversion_is_that_of_the_model_input_spec():
    conv = torch.nn.Conv2d(3, 4, 3).eval()
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    with torch.inference_mode():
        plain = ImageInput(conv, None, None, "cpu")(BATCH)
        normalised = ImageInput(conv, mean, std, "cpu")(BATCH)
        x = BATCH.float().div(255.0)
        assert torch.equal(plain, conv(x))
        assert torch.equal(normalised, conv((x - torch.tensor(mean).view(1, 3, 1, 1))
                                            / torch.tensor(std).view(1, 3, 1, 1)))


def test_a_loaded_root_fragment_traces_the_conversion_with_its_module(tmp_path):
    write_model(tmp_path, "tiny", 1, {"input": {**TINY_INPUT, "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3]}})
    repo = ModelRepository(tmp_path)
    spec = repo.spec("tiny", 1)
    model = load_model(spec, tmp_path / "tiny" / "1", 1, "cpu")
    root = model.fragments["backbone"]
    out = root.run(BATCH)
    with torch.inference_mode():
        x = (BATCH.float().div(255.0) - torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1)) \
            / torch.tensor([0.2, 0.25, 0.3]).view(1, 3, 1, 1)
        assert torch.allclose(out, root.module(x), rtol=1e-5, atol=1e-6)
    # the trace (which runs with the GIL released) takes the uint8 batch itself
    traces = [t for t in root.run._traces.values() if t is not None]
    assert len(traces) == 1
    graph = str(traces[0].inlined_graph)
    assert "aten::div" in graph and "%batch : Byte(" in graph
