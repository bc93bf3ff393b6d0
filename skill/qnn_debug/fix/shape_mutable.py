"""Fix for ``input_not_copied``: ``shapeMutable`` false in the run's test dir, and the command that re-runs it.

The toggle rewrites input.json atomically and keeps the previous file; whether the phone now copies the input
can only be seen on the phone (or a host MNN build), so this fix says so and is never counted as proven here.
"""

from __future__ import annotations

import shlex

from ..errors import BadInputError
from ..next_step import NextStep
from .models import FixResult, Numbers


def fix_shape_mutable(test_dir: str | None, verdict: str, before: Numbers, mnn_model: str | None) -> FixResult:
    """Set ``shapeMutable`` false in ``test_dir``; the re-run is the user's (phone or host build)."""
    from ..mnn.testdir import toggle_shape_mutable

    if test_dir is None:
        raise BadInputError("input_not_copied is fixed in the ModuleBasic test dir the run used, and none was given",
                            hint="pass --test-dir with the folder holding input.json")
    toggled = toggle_shape_mutable(test_dir, False)
    model = shlex.quote(mnn_model) if mnn_model else '"$MNN_MODEL"'
    rerun = f"qnn-debug run {model} --target device --testdir {shlex.quote(test_dir)}"
    why = "the same run with shapeMutable false: the verdict must leave input_not_copied"
    if not mnn_model:
        why += "; set MNN_MODEL to the .mnn the phone ran"
    state = "set from " + ("absent (true)" if toggled.old is None else str(toggled.old).lower()) + " to false" \
        if toggled.changed else "already false"
    return FixResult(
        kind="shape_mutable", verdict=verdict, artefact=toggled.file, proven=False, before=before,
        summary=f"shapeMutable {state} in {toggled.file}" + (f" (previous file kept as {toggled.backup})"
                                                               if toggled.backup else "") + ". Not proven here: only "
        "a run on the phone or a host MNN build shows the input is now copied.",
        not_proven=["the re-run on the phone (or a host MNN build): " + rerun],
        next_steps=[NextStep(tool="run_on_device", cli=rerun, why=why)])
