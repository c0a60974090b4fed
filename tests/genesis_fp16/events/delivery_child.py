"""A delivery process for the kill test: passes over STATE's outboxes to URL until every
event is delivered (or forever with --forever), printing ``ready`` once imported so the
test's SIGKILL lands during delivery, not during start-up."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from genesis_fp16.events.delivery import Deliverer, DeliveryConfig


def main() -> None:
    state, url, secret = Path(sys.argv[1]), sys.argv[2], sys.argv[3].encode()
    config = DeliveryConfig(state, (url,), secret, timeout=5.0, backoff_max=0.05)
    deliverer = Deliverer(lambda: config)
    print("ready", flush=True)
    while True:
        wait = deliverer.step()
        if wait is not None:
            time.sleep(min(wait, 0.05))
        else:
            time.sleep(0.01)


if __name__ == "__main__":
    main()
