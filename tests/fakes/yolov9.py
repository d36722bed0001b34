"""Stand-ins for YOLOv9's scripts that write what the real ones write, where they write it, in the order
they write it (shared/vendor/README.md): a results.csv row per epoch *before* that epoch's last.pt,
checkpoints shaped like torch.save's (a zip whose data.pkl holds ``epoch``), opt.yaml next to weights/,
a stripped (epoch -1) last.pt and best.pt at the end, and ``--resume`` that takes every option from
opt.yaml. They run in a second on any machine, without torch.

Environment knobs: FAKE_EPOCH_SECONDS (default 0.05), FAKE_OOM_ABOVE (a per-GPU batch above this
"runs out of CUDA memory" at the start), FAKE_DIE_AFTER (exit 1 after that epoch's last.pt),
FAKE_HANG_AFTER (sleep FAKE_HANG_SECONDS, default 60, after that epoch's row, before its last.pt).
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

RESULTS_HEADER = ("               epoch,      train/box_loss,   metrics/precision,      metrics/recall,"
                  "     metrics/mAP_0.5,metrics/mAP_0.5:0.95\n")


_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def checkpoint_bytes(epoch: int) -> bytes:
    """A file shaped like YOLOv9's last.pt holding ``epoch`` (no torch needed to read it back)."""
    buf = io.BytesIO()
    # Fixed entry dates: zipfile stamps the clock by default, and a test that writes the same checkpoint twice
    # a second apart would see different bytes.
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo("last/data.pkl", _ZIP_DATE),
                   pickle.dumps({"epoch": epoch, "best_fitness": 0.5, "model": None,
                                 "optimizer": None if epoch == -1 else {"state": {}}}, protocol=2))
        z.writestr(zipfile.ZipInfo("last/version", _ZIP_DATE), "3\n")
    return buf.getvalue()


_CHECKPOINT = '''
def checkpoint(path, epoch):
    import io, pickle, zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo("last/data.pkl", (1980, 1, 1, 0, 0, 0)),
                   pickle.dumps({"epoch": epoch, "best_fitness": 0.5, "model": None,
                                 "optimizer": None if epoch == -1 else {"state": {}}}, protocol=2))
        z.writestr(zipfile.ZipInfo("last/version", (1980, 1, 1, 0, 0, 0)), "3\\n")
    open(path, "wb").write(buf.getvalue())


def held_epoch(path):
    import pickle, zipfile
    with zipfile.ZipFile(path) as z:
        name = [n for n in z.namelist() if n.endswith("data.pkl")][0]
        return pickle.loads(z.read(name))["epoch"]
'''

TRAIN = _CHECKPOINT + '''
import os, sys, time
import yaml

a = sys.argv


def arg(flag, default=None):
    return a[a.index(flag) + 1] if flag in a else default


if "--resume" in a:
    last = arg("--resume")
    opt = yaml.safe_load(open(os.path.join(os.path.dirname(os.path.dirname(last)), "opt.yaml")))
    start = held_epoch(last) + 1
    if start <= 0:
        print(f"AssertionError: {last} training to {opt['epochs']} epochs is finished, nothing to resume.")
        sys.exit(1)
    print(f"Resuming training from {last} from epoch {start} to {opt['epochs']} total epochs")
else:
    opt = {"weights": arg("--weights"), "cfg": arg("--cfg"), "data": arg("--data"),
           "hyp": {"lr0": 0.01, "batch_size": 999}, "epochs": int(arg("--epochs")), "batch_size": int(arg("--batch")),
           "imgsz": int(arg("--img")), "device": arg("--device"), "workers": int(arg("--workers")),
           "project": arg("--project"), "name": arg("--name"),
           "save_dir": os.path.join(arg("--project"), arg("--name"))}
    start = 0
save_dir = opt["save_dir"]
if not os.path.isfile(opt["data"]):
    print(f"FileNotFoundError: dataset {opt['data']} not found")
    sys.exit(2)
weights = opt.get("weights") or ""
if "--resume" not in a and weights and not os.path.isfile(weights):
    print(f"FileNotFoundError: {weights} not found")
    sys.exit(2)
os.makedirs(os.path.join(save_dir, "weights"), exist_ok=True)
yaml.safe_dump(opt, open(os.path.join(save_dir, "opt.yaml"), "w"), sort_keys=False)
devices = 1 if opt["device"] in ("cpu", None) else len(str(opt["device"]).split(","))
per_gpu = opt["batch_size"] // devices
print(f"batch {opt['batch_size']} on {opt['device']} workers {opt['workers']}", flush=True)
oom = os.environ.get("FAKE_OOM_ABOVE")
if oom and per_gpu > int(oom):
    print("Traceback (most recent call last):")
    print("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.20 GiB "
          "(GPU 0; 22.20 GiB total capacity)", flush=True)
    sys.exit(1)
csv = os.path.join(save_dir, "results.csv")
step = float(os.environ.get("FAKE_EPOCH_SECONDS", "0.05"))
for e in range(start, opt["epochs"]):
    time.sleep(step)
    new = not os.path.exists(csv)
    with open(csv, "a") as f:
        f.write(("               epoch,      train/box_loss,   metrics/precision,      metrics/recall,"
                 "     metrics/mAP_0.5,metrics/mAP_0.5:0.95\\n" if new else "")
                + f"{e:20d},{1.0:20.5g},{0.5:20.5g},{0.5:20.5g},{0.4:20.5g},{0.3:20.5g}\\n")
    if os.environ.get("FAKE_HANG_AFTER") == str(e):
        time.sleep(float(os.environ.get("FAKE_HANG_SECONDS", "60")))
    checkpoint(os.path.join(save_dir, "weights", "last.pt"), e)
    if e % 2 == 0:  # every other epoch does better
        checkpoint(os.path.join(save_dir, "weights", "best.pt"), e)
    print(f"epoch {e} done", flush=True)
    if os.environ.get("FAKE_DIE_AFTER") == str(e):
        print("RuntimeError: CUDA error: an illegal memory access was encountered", flush=True)
        sys.exit(1)
for name in ("last.pt", "best.pt"):
    path = os.path.join(save_dir, "weights", name)
    if os.path.exists(path):
        checkpoint(path, -1)  # strip_optimizer
open(os.path.join(save_dir, "results.png"), "wb").write(b"png")
print(f"{opt['epochs'] - start} epochs completed. Results saved to {save_dir}")
'''

VAL = '''
import os, sys
a = sys.argv


def arg(flag):
    return a[a.index(flag) + 1]


for path in (arg("--data"), arg("--weights")):
    if not os.path.isfile(path):
        print(f"FileNotFoundError: {path}")
        sys.exit(2)
run = os.path.join(arg("--project"), arg("--name"))
os.makedirs(run, exist_ok=True)
open(os.path.join(run, "PR_curve.png"), "wb").write(b"png")
open(os.path.join(run, "confusion_matrix.png"), "wb").write(b"png")
print("                 Class     Images  Instances          P          R      mAP50   mAP50-95")
if os.environ.get("FAKE_VAL_SILENT") != "1":
    print("                   all        500       1234      0.812      0.743      0.801      0.552")
print(f"Results saved to {run}")
'''


def fake_checkout(folder: Path) -> Path:
    """A YOLOv9 checkout whose train_dual.py / train.py and val.py / val_dual.py are the stand-ins above."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("train_dual.py", "train.py"):
        (folder / name).write_text(TRAIN)
    for name in ("val.py", "val_dual.py"):
        (folder / name).write_text(VAL)
    return folder


DATA_YAML = "path: /datasets/helmet\ntrain: images/train\nval: images/val\nnames: {0: helmet, 1: head}\n"


def dataset_files() -> dict[str, bytes | str]:
    """A dataset folder as it lies in the bucket: data.yaml with the images and labels it names."""
    return {"data.yaml": DATA_YAML, "images/train/0001.jpg": b"jpg", "images/val/0002.jpg": b"jpg",
            "labels/train/0001.txt": "0 0.5 0.5 0.2 0.2\n", "labels/val/0002.txt": "1 0.5 0.5 0.1 0.1\n"}
