"""Build a package per ported PyTorch combo-kernel test case, for the GPU check.

    .venv/bin/python scripts/build_combo_tests.py [CASE ...] [--out .carry/combo]

Each case of ``tests/models/combo_test_models.py`` becomes package ``combo_<case>`` for sm_90, at
the PyTorch test's own sizes (a dynamic case with its batch range; those of ``GPU_SMALL``, too
large to carry, at their interpreter size), and only the wheel pip
picks on the GPU machine is kept. ``tests/gpu/test_gpu_combo_tests.py`` checks them against eager.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # aotcombo and aotcombo.testing from this checkout

from aotcombo.errors import BuildError  # noqa: E402
from aotcombo.testing import combo as S  # noqa: E402
from aotcombo.testing.corpora import combo_test_models  # noqa: E402

M = combo_test_models()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", default=list(M.CASES))
    parser.add_argument("--out", default=str(ROOT / ".carry" / "combo"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in args.cases:
        start = time.perf_counter()
        try:
            _, result = S.build(M.CASES[name], out, name=S.package_name(name), cache=True, small=name in S.GPU_SMALL)
        except BuildError as exc:
            failed.append(name)
            print(f"{name}: FAILED: {exc.title}: {exc}", flush=True)
            continue
        for wheel in result.wheels[:-1]:
            wheel.unlink()
        print(f"{result.wheels[-1].name}: {time.perf_counter() - start:.1f} s", flush=True)
    print(f"{len(args.cases) - len(failed)} built, {len(failed)} failed: {', '.join(failed) or 'none'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
