"""Child-process runners carry data through files and pipes, never on the command line (128 KiB per argument)."""
from __future__ import annotations

import os

import numpy as np

import feedbeast as fb
from feedbeast.isolated import runner_command


def test_isolated_takes_values_far_past_the_argument_limit():
    big = np.random.default_rng(0).standard_normal(400_000)         # 3.2 MB pickled
    out = fb.isolated("print(repr(float(big.sum())), big.dtype, big.shape)", big=big)
    total, dtype, shape = out.split(maxsplit=2)
    assert float(total) == float(big.sum()) and dtype == "float64" and shape.strip() == "(400000,)"


def test_the_command_line_stays_short_whatever_the_values():
    with runner_command({"x": np.zeros(1_000_000)}) as cmd:
        assert max(len(a) for a in cmd) < 4096
        assert os.path.getsize(cmd[-1]) > 8_000_000                 # the values are in the file
    assert not os.path.exists(cmd[-1])                               # and the file is gone after


def test_code_through_a_file_when_a_tool_stands_between():
    """fb.profile's child runs under ncu, which keeps its own stdin: the code goes through a file too, and what
    it binds and raises comes back as from fb.isolated."""
    import subprocess
    from feedbeast.isolated import child_env
    with runner_command({"big": np.arange(300_000)}, "print(int(big.sum()))\nraise fb.CheckFailed('no')\n") as cmd:
        assert max(len(a) for a in cmd) < 4096 and open(cmd[-1]).read().startswith("print(")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=child_env(), stdin=subprocess.DEVNULL)
    assert r.stdout.split("\n")[0] == str(sum(range(300_000))) and '"CheckFailed"' in r.stdout and r.returncode == 3
