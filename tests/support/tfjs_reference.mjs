// TensorFlow.js's own answer for a COCO graph model: the reference that Vigil's native
// loader (models/tfjs) and decoders (models/anchor_free.py) are tested against.
//
// node tfjs_reference.mjs REQUEST.json  ->  RESULT.json beside it
//
// REQUEST: {model: model.json path, kind: "centernet_ltrb" | "gfl", inputs: raw uint8 files of
// network inputs ([h, w, 3], as Vigil resized them, in the model's channel order), hw, mean,
// std (over [0, 1], as model.yaml's), nchw, outputs ({key: graph node}), raw (keys whose
// values come back for the first input), min_score, nms_iou, max_detections, frames: each
// input's frame [width, height], labels: the class count}.
// RESULT: {detections: per input [[x1, y1, x2, y2, score, class], ...] in frame pixels,
// raw: {key: {shape, data}}}.
// Runs on @tensorflow/tfjs-backend-cpu, pure JavaScript.
import fs from 'node:fs';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import { loadGraphModel } from '@tensorflow/tfjs-converter';

function fileHandler(modelPath) {
  return {
    load: async () => {
      const doc = JSON.parse(fs.readFileSync(modelPath, 'utf8'));
      const specs = [];
      const buffers = [];
      for (const group of doc.weightsManifest) {
        specs.push(...group.weights);
        for (const shard of group.paths) buffers.push(fs.readFileSync(path.join(path.dirname(modelPath), shard)));
      }
      const all = Buffer.concat(buffers);
      return {
        modelTopology: doc.modelTopology, format: doc.format, generatedBy: doc.generatedBy,
        convertedBy: doc.convertedBy, signature: doc.signature, userDefinedMetadata: doc.userDefinedMetadata,
        weightSpecs: specs, weightData: all.buffer.slice(all.byteOffset, all.byteOffset + all.byteLength),
      };
    },
  };
}

function centernet(out, hw, minScore) {
  // tower_0/detections: [1, 100, 6], x1, y1, x2, y2 in input pixels, score, class
  const rows = out.detections.arraySync()[0];
  return rows.filter((r) => r[4] > minScore);
}

function gfl(out, hw, labels, minScore) {
  const found = [];
  for (const t of Object.values(out)) {
    if (t.shape[2] !== labels) continue;
    const cells = t.shape[1];
    const dist = Object.values(out).find((d) => d.shape[1] === cells && d.shape[2] !== labels);
    let stride = 0;
    for (const s of [4, 8, 16, 32, 64, 128]) if (Math.ceil(hw[0] / s) * Math.ceil(hw[1] / s) === cells) stride = s;
    const cols = Math.ceil(hw[1] / stride);
    const bins = dist.shape[2] / 4;
    const sides = tf.tidy(() => tf.mul(tf.sum(tf.mul(tf.softmax(tf.reshape(dist, [cells, 4, bins])),
      tf.range(0, bins)), 2), stride).arraySync());
    const scores = t.arraySync()[0];
    for (let i = 0; i < cells; i++) {
      const cx = ((i % cols) + 0.5) * stride;
      const cy = (Math.floor(i / cols) + 0.5) * stride;
      for (let c = 0; c < labels; c++) {
        if (scores[i][c] > minScore) {
          const [l, tp, r, b] = sides[i];
          found.push([cx - l, cy - tp, cx + r, cy + b, scores[i][c], c]);
        }
      }
    }
  }
  return found;
}

function suppress(rows, iou, maxDetections) {
  // per class, as torchvision's batched_nms; then the best maxDetections overall
  const kept = [];
  for (const c of new Set(rows.map((r) => r[5]))) {
    const mine = rows.filter((r) => r[5] === c);
    const boxes = tf.tensor2d(mine.map((r) => [r[1], r[0], r[3], r[2]]));
    const scores = tf.tensor1d(mine.map((r) => r[4]));
    const idx = tf.image.nonMaxSuppression(boxes, scores, mine.length, iou, -Infinity).arraySync();
    for (const i of idx) kept.push(mine[i]);
    tf.dispose([boxes, scores]);
  }
  kept.sort((a, b) => b[4] - a[4]);
  return kept.slice(0, maxDetections);
}

async function main() {
  const requestPath = process.argv[2];
  const req = JSON.parse(fs.readFileSync(requestPath, 'utf8'));
  await tf.setBackend('cpu');
  const model = await loadGraphModel(fileHandler(req.model));
  const [h, w] = req.hw;
  const names = Object.entries(req.outputs);
  const detections = [];
  const raw = {};
  req.inputs.forEach((file, n) => {
    const bytes = fs.readFileSync(file);
    let x = tf.div(tf.cast(tf.tensor3d(new Uint8Array(bytes), [h, w, 3], 'int32'), 'float32'), 255);
    x = tf.expandDims(tf.div(tf.sub(x, tf.tensor1d(req.mean)), tf.tensor1d(req.std)), 0);
    if (req.nchw) x = tf.transpose(x, [0, 3, 1, 2]);
    const results = model.execute(x, names.map(([, node]) => node));
    const out = {};
    names.forEach(([key], i) => { out[key] = Array.isArray(results) ? results[i] : results; });
    const rows = req.kind === 'centernet_ltrb' ? centernet(out, req.hw, req.min_score)
      : gfl(out, req.hw, req.labels, req.min_score);
    const [fw, fh] = req.frames[n];
    detections.push(suppress(rows, req.nms_iou, req.max_detections).map((r) => [
      Math.min(Math.max(r[0] * fw / w, 0), fw), Math.min(Math.max(r[1] * fh / h, 0), fh),
      Math.min(Math.max(r[2] * fw / w, 0), fw), Math.min(Math.max(r[3] * fh / h, 0), fh), r[4], r[5]]));
    if (n === 0) for (const key of req.raw || []) raw[key] = { shape: out[key].shape, data: Array.from(out[key].dataSync()) };
    tf.dispose([x, ...Object.values(out)]);
  });
  fs.writeFileSync(requestPath.replace(/\.json$/, '.result.json'), JSON.stringify({ detections, raw }));
}

main().catch((err) => { console.error(err.stack || String(err)); process.exit(1); });
