from typing import Any


class MonitorReport: pass
def monitor(*a: Any, **k: Any) -> Any: ...
