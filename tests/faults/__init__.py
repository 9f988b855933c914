"""Test-only systems under test, one fault each, wrong only in one situation: a module per family (and the
harness's own faults, :mod:`.harness`; how a fault gets inside torch, :mod:`.injection`).

Cases name them as ``tests.faults:ClassName`` (rank processes import them by that name): this package exports
every fault class of its modules.
"""

from tests.faults.harness import *  # noqa: F401,F403
from tests.faults.fsdp2 import *  # noqa: F401,F403
from tests.faults.tensor_parallel import *  # noqa: F401,F403
from tests.faults.fsdp1 import *  # noqa: F401,F403
from tests.faults.zero import *  # noqa: F401,F403
from tests.faults.composable import *  # noqa: F401,F403
from tests.faults.pipeline import *  # noqa: F401,F403
