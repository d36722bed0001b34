"""Run the Alibaba ECS and Tencent CVM emulators as a process, for a daemon to point at.

    python -m providers.emulators.serve --alibaba-port 9301 --tencent-port 9302 [--speedup 60]

It prints the settings that point a daemon (backend=live) at them. The market behind
them is the sandbox cloud on a clock running ``--speedup`` times real time, so a
daemon started with the same GPUSCHED_SANDBOX_SPEEDUP sees boots and jobs at the
same pace, and with the same GPUSCHED_SANDBOX_EPOCH the same time. Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import signal
import threading
from datetime import datetime, timezone

from providers.catalog import filter_offers, load_catalog
from providers.emulators.alibaba_ecs import AlibabaEcsEmulator
from providers.emulators.tencent_cvm import TencentCvmEmulator
from providers.sandbox.provider import SandboxCloud
from scheduler.clock import ScaledClock, SystemClock

KEY_ID, SECRET = "emulator-key", "emulator-secret"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alibaba-port", type=int, default=9301)
    ap.add_argument("--tencent-port", type=int, default=9302)
    ap.add_argument("--speedup", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    # A daemon given the same epoch (printed below) reads the same time, and so does one restarted later.
    epoch = datetime.now(timezone.utc)
    clock = SystemClock() if args.speedup == 1 else ScaledClock(args.speedup, epoch=epoch)
    catalog = load_catalog()
    ali = AlibabaEcsEmulator(SandboxCloud(clock, filter_offers(catalog, providers=["alibaba"]), seed=args.seed),
                             {KEY_ID: SECRET}, port=args.alibaba_port)
    ten = TencentCvmEmulator(SandboxCloud(clock, filter_offers(catalog, providers=["tencent"]), seed=args.seed + 1),
                             clock, {KEY_ID: SECRET}, seed=args.seed, port=args.tencent_port)
    print("# emulators up; point a daemon at them with:")
    print("GPUSCHED_BACKEND=live")
    print("GPUSCHED_PROVIDERS=alibaba,tencent")
    print("GPUSCHED_SIM_AGENTS=true")
    print(f"GPUSCHED_SANDBOX_SPEEDUP={args.speedup:g}")
    print(f"GPUSCHED_SANDBOX_EPOCH={epoch.isoformat()}")
    print(f"GPUSCHED_ALIBABA_ENDPOINT={ali.endpoint}")
    print("GPUSCHED_ALIBABA_PROTOCOL=http")
    print(f"GPUSCHED_ALIBABA_ACCESS_KEY_ID={KEY_ID}")
    print(f"GPUSCHED_ALIBABA_ACCESS_KEY_SECRET={SECRET}")
    print("GPUSCHED_ALIBABA_REGIONS='[\"cn-hangzhou\",\"cn-shanghai\",\"cn-beijing\",\"cn-wulanchabu\"]'")
    print("GPUSCHED_ALIBABA_IMAGE_ID=m-emulated")
    print(f"GPUSCHED_TENCENT_ENDPOINT={ten.endpoint}")
    print("GPUSCHED_TENCENT_PROTOCOL=http")
    print(f"GPUSCHED_TENCENT_SECRET_ID={KEY_ID}")
    print(f"GPUSCHED_TENCENT_SECRET_KEY={SECRET}")
    print("GPUSCHED_TENCENT_REGIONS='[\"ap-guangzhou\"]'")
    print("GPUSCHED_TENCENT_IMAGE_ID=img-emulated", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        ali.close()
        ten.close()


if __name__ == "__main__":
    main()
