"""The simulation scenarios. Each module registers its scenarios with
`tests.sim.registry.scenario`; list a new module here so the registry loads it."""

from . import diskless_write  # noqa: F401
from . import cluster  # noqa: F401
from . import isr  # noqa: F401
from . import wal_gc  # noqa: F401
from . import wal_gc_replicas  # noqa: F401
from . import tiering  # noqa: F401
from . import mode_switch  # noqa: F401
from . import transactions  # noqa: F401
from . import tiered_delete_records  # noqa: F401
from . import scale  # noqa: F401
