"""Run the Alibaba ECS, Tencent CVM and Huawei ECS emulators as a process, for a daemon to point at.

    python -m providers.emulators.serve --alibaba-port 9301 --tencent-port 9302 --huawei-port 9303
        [--speedup 60 [--clock-start T]]
        [--fault-rate 0.1 --fault-seed 7 --fault-kinds throttle,5xx,timeout,lost --fault-actions RunInstances]

It prints the settings that point a daemon (backend=live) at them. The market behind
them is the sandbox cloud on a clock running ``--speedup`` times real time, so a
daemon started with the same GPUSCHED_SANDBOX_SPEEDUP sees boots and jobs at the
same pace; they read from GPUSCHED_SANDBOX_CLOCK_START (``--clock-start``, an ISO time with its offset;
by default the moment they start, printed below), and daemons given the same one read the same time, a
daemon restarted after a crash included. ``--fault-rate`` makes all three emulators fail
that share of calls at random (seeded; see providers/emulators/faults.py); each flag also reads its
environment variable (GPUSCHED_EMULATOR_FAULT_RATE, _SEED, _KINDS, _ACTIONS). ``--fault-actions`` takes the
clouds' own call names; ``RunInstances`` (and DescribeInstances, TerminateInstances ...) also names Huawei's
CreatePostPaidServers (ListServersDetails, DeleteServers ...). Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from providers.catalog import filter_offers, load_catalog
from providers.emulators.alibaba_ecs import AlibabaEcsEmulator
from providers.emulators.faults import FaultPlan
from providers.emulators.huawei_ecs import HuaweiEcsEmulator
from providers.emulators.tencent_cvm import TencentCvmEmulator
from providers.sandbox.provider import SandboxCloud
from scheduler.clock import ScaledClock, SystemClock

KEY_ID, SECRET = "emulator-key", "emulator-secret"
HUAWEI_PROJECT = "0e5e1a70e0000000000000000emulate"  # the emulated cn-north-4 project
ENV_PREFIX = "GPUSCHED_EMULATOR_FAULT_"


def _rate(text: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a share of calls, e.g. 0.1") from None
    if not 0.0 <= rate <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1; give a share of calls, e.g. 0.1")
    return rate


def parse_args(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    env = os.environ if environ is None else environ
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--alibaba-port", type=int, default=9301)
    ap.add_argument("--tencent-port", type=int, default=9302)
    ap.add_argument("--huawei-port", type=int, default=9303)
    ap.add_argument("--speedup", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--clock-start", type=datetime.fromisoformat, default=None,
                    help="with --speedup: the real moment (ISO, with offset) the sped-up clock runs from")
    # String defaults go through ``type`` as typed flags do: a bad variable is refused the same way.
    ap.add_argument("--fault-rate", type=_rate, default=env.get(f"{ENV_PREFIX}RATE", "0"),
                    help="share of calls that fail at random, 0 to 1 (default 0: none)")
    ap.add_argument("--fault-seed", type=int, default=env.get(f"{ENV_PREFIX}SEED", "0"),
                    help="seed of the fault draws: one seed, one call sequence, the same faults")
    ap.add_argument("--fault-kinds", default=env.get(f"{ENV_PREFIX}KINDS", ""),
                    help="comma-separated: throttle, 5xx, timeout, lost (default: all four)")
    ap.add_argument("--fault-actions", default=env.get(f"{ENV_PREFIX}ACTIONS", ""),
                    help="comma-separated cloud actions to fail, e.g. RunInstances, which names every emulator's "
                         "launch (default: every call)")
    args = ap.parse_args(argv)
    if args.clock_start is not None and args.speedup != 1:
        try:
            ScaledClock(args.speedup, since=args.clock_start)
        except ValueError as exc:
            ap.error(f"--clock-start: {exc}")
    try:
        args.faults = FaultPlan(rate=args.fault_rate, seed=args.fault_seed,
                                kinds=FaultPlan.parse_kinds(args.fault_kinds),
                                actions=FaultPlan.parse_actions(args.fault_actions))
    except ValueError as exc:
        ap.error(str(exc))
    return args


def start_emulators(args: argparse.Namespace) -> tuple[AlibabaEcsEmulator, TencentCvmEmulator, HuaweiEcsEmulator]:
    """The three emulators ``args`` asks for, listening, each failing calls as ``args.faults`` deals them."""
    clock = SystemClock() if args.speedup == 1 else ScaledClock(args.speedup, since=args.clock_start)
    catalog = load_catalog()
    ali = AlibabaEcsEmulator(SandboxCloud(clock, filter_offers(catalog, providers=["alibaba"]), seed=args.seed),
                             {KEY_ID: SECRET}, port=args.alibaba_port, faults=args.faults)
    ten = TencentCvmEmulator(SandboxCloud(clock, filter_offers(catalog, providers=["tencent"]), seed=args.seed + 1),
                             clock, {KEY_ID: SECRET}, seed=args.seed, port=args.tencent_port, faults=args.faults)
    hw = HuaweiEcsEmulator(SandboxCloud(clock, filter_offers(catalog, providers=["huawei"], regions=["cn-north-4"]),
                                        seed=args.seed + 2), clock, {KEY_ID: SECRET}, {HUAWEI_PROJECT: "cn-north-4"},
                           seed=args.seed, port=args.huawei_port, faults=args.faults)
    return ali, ten, hw


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.speedup != 1 and args.clock_start is None:
        # A daemon given the same start (printed below) reads the same time, and so does one restarted later.
        args.clock_start = datetime.now(timezone.utc)
    ali, ten, hw = start_emulators(args)
    print("# emulators up; point a daemon at them with:")
    plan = args.faults
    if plan.rate:
        print(f"# failing {plan.rate:.0%} of calls ({', '.join(plan.kinds)}) with seed {plan.seed}")
    print("GPUSCHED_BACKEND=live")
    print("GPUSCHED_PROVIDERS=alibaba,tencent,huawei")
    print("GPUSCHED_SIM_AGENTS=true")
    print(f"GPUSCHED_SANDBOX_SPEEDUP={args.speedup:g}")
    if args.clock_start is not None:
        print(f"GPUSCHED_SANDBOX_CLOCK_START={args.clock_start.isoformat()}")
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
    print("# the bundled catalog's Tencent prices are the international site's, in USD")
    print("GPUSCHED_TENCENT_CURRENCY=USD")
    print("GPUSCHED_TENCENT_IMAGE_ID=img-emulated")
    print(f"GPUSCHED_HUAWEI_ENDPOINT={hw.endpoint}")
    print(f"GPUSCHED_HUAWEI_ACCESS_KEY={KEY_ID}")
    print(f"GPUSCHED_HUAWEI_SECRET_KEY={SECRET}")
    print("GPUSCHED_HUAWEI_REGIONS='[\"cn-north-4\"]'")
    print(f"GPUSCHED_HUAWEI_PROJECT_ID={HUAWEI_PROJECT}")
    print("GPUSCHED_HUAWEI_IMAGE_ID=00000000-0000-4000-8000-0000000e0001")
    print("GPUSCHED_HUAWEI_VPC_ID=00000000-0000-4000-8000-0000000e0002")
    print("GPUSCHED_HUAWEI_SUBNET_IDS='{\"cn-north-4a\": \"00000000-0000-4000-8000-0000000e0003\", "
          "\"cn-north-4b\": \"00000000-0000-4000-8000-0000000e0004\"}'", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        ali.close()
        ten.close()
        hw.close()


if __name__ == "__main__":
    main()
