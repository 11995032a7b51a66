"""Every detector family, imported in display order. A new family is a module in this package plus one line here."""

from core.detectors import repcs  # noqa: F401, I001 - order is the display order
from core.detectors import crm  # noqa: F401
from core.detectors import selfcritique  # noqa: F401
from core.detectors import sma  # noqa: F401
from core.detectors import radar  # noqa: F401
from core.detectors import baselines  # noqa: F401
from core.detectors import fitted  # noqa: F401
from core.detectors import lookback  # noqa: F401
from core.detectors import redeep  # noqa: F401
from core.detectors import combined  # noqa: F401 - after every family it combines
