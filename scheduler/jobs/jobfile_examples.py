"""A right value for every field of job.yaml, shown under each problem the loader reports.

``FIELD_EXAMPLES`` is keyed by dotted paths without list indices (``resources.gpus``), plus
``FILE_FIELD`` for problems with the file as a whole; ``tests/jobs/test_jobfile.py`` keeps it
complete against ``scheduler.models.JobSpec``. ``example_for`` picks the example for a field,
falling back to its section's for a key the table does not have.
"""

from __future__ import annotations

__all__ = ["FIELD_EXAMPLES", "FILE_FIELD", "example_for"]

FILE_FIELD = "(file)"

# A right value for every field, shown under each problem. Keys are dotted
# paths without list indices; a test keeps this table complete.
FIELD_EXAMPLES: dict[str, str] = {
    FILE_FIELD: "see examples/helmet-s-train.yaml",
    "name": "helmet-v3",
    "team": "vision-qa",
    "project": "safety-helmet",
    "kind": "train (or infer, val, export)",
    "model": "yolov9-s",
    "data": "{uri: s3://bucket/datasets/helmet, train_images: 12000, val_images: 1500}",
    "data.uri": "s3://bucket/datasets/helmet",
    "data.train_images": "12000",
    "data.val_images": "1500",
    "train": "{epochs: 100, img_size: 640, batch: 64}",
    "train.epochs": "100",
    "train.img_size": "640",
    "train.batch": "64",
    "train.weights": "yolov9-s.pt, s3://bucket/weights/yolov9-s.pt or '' (from scratch)",
    "train.hyp": "hyp.scratch-high.yaml",
    "train.close_mosaic": "15",
    "train.patience": "100",
    "infer": "{source: s3://bucket/images/2026-11/, images: 200000, weights: s3://bucket/runs/helmet-v3/best.pt}",
    "infer.source": "s3://bucket/images/2026-11/",
    "infer.images": "200000",
    "infer.img_size": "640",
    "infer.weights": "s3://bucket/runs/helmet-v3/best.pt",
    "infer.conf": "0.25",
    "infer.iou": "0.45",
    "infer.output": "s3://bucket/runs/helmet-infer/",
    "val": "{weights: s3://bucket/runs/helmet-v3/best.pt, batch: 32}",
    "val.weights": "s3://bucket/runs/helmet-v3/best.pt",
    "val.img_size": "640",
    "val.batch": "32",
    "export": "{weights: s3://bucket/runs/helmet-v3/best.pt, formats: [onnx, engine], half: true}",
    "export.weights": "s3://bucket/runs/helmet-v3/best.pt",
    "export.formats": "[onnx, engine]",
    "export.img_size": "640",
    "export.half": "true (and dynamic: false)",
    "export.dynamic": "false (or half: false)",
    "resources": "{gpus: [A10, L4, A10G], gpu_count: 1, nodes: 1}",
    "resources.gpus": "[A10, L4, A10G]",
    "resources.gpu_count": "1",
    "resources.nodes": "1",
    "where": "{providers: [aws, alibaba, tencent], regions: [cn-hangzhou]}",
    "where.providers": "[aws, alibaba, tencent]",
    "where.regions": "[cn-hangzhou, ap-guangzhou, us-east-1]",
    "policy": "{deadline: 36h, budget: 800 CNY}",
    "policy.capacity": "auto (or spot, on-demand, reserved)",
    "policy.deadline": "2026-12-10T18:00:00+08:00 or 36h",
    "policy.budget": "800 CNY",
    "policy.priority": "50",
    "policy.max_restarts": "10",
    "policy.idle_stop_minutes": "10",
}


def example_for(key: str) -> str | None:
    if key in FIELD_EXAMPLES:
        return FIELD_EXAMPLES[key]
    parent = key.rpartition(".")[0]
    # An unknown key: show what its section looks like.
    return FIELD_EXAMPLES.get(parent) if parent else FIELD_EXAMPLES[FILE_FIELD]
