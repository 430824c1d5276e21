"""The suite's own test ids: pytest-xdist (`pytest -n N`) requires every worker process to collect the
same ids, and an id holding an object's address (`<object object at 0x7f...>`) differs per process,
so the whole run stopped at collection (seen on a 16-core machine)."""
import re


def test_collected_ids_hold_no_addresses(request):
    """Checks the ids this session collected: the whole suite under `make test`."""
    addressed = [item.nodeid for item in request.session.items if re.search(r" at 0x[0-9a-fA-F]+", item.nodeid)]
    assert not addressed, addressed
