"""Maintenance services that only the elected leader runs: promoter, rescuer, pruner and
the cron scheduler.

Each is one class with a `run_once()`; `MaintenanceLoop` schedules them while this process
holds the leader lease, and stops them the moment it does not.
"""
