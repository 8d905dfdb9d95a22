"""The worker runtime behind `manage.py awa_worker` (DESIGN §4): one asyncio loop per
process running a dispatcher per queue, the executor, the completer, the heartbeat, the
listener and — in the elected leader — maintenance."""
