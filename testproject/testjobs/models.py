"""Evidence the acceptance tests read: one row per handler execution and per hook call."""

from __future__ import annotations

from django.db import models


class Execution(models.Model):
    job_id = models.BigIntegerField(db_index=True)
    run_lease = models.BigIntegerField()
    pid = models.IntegerField()
    at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"job {self.job_id} lease {self.run_lease} in {self.pid}"


class HookCall(models.Model):
    job_id = models.BigIntegerField(db_index=True)
    event = models.CharField(max_length=40)
    state = models.CharField(max_length=20)
    run_lease = models.BigIntegerField()
    pid = models.IntegerField()
    detail = models.TextField(blank=True, default="")

    def __str__(self) -> str:
        return f"{self.event} for job {self.job_id}"


class Invoice(models.Model):
    """A row an atomic handler writes: the tests count them (exactly-once effects)."""

    order_id = models.BigIntegerField(db_index=True)
    job_id = models.BigIntegerField()
    run_lease = models.BigIntegerField()
    pid = models.IntegerField()

    def __str__(self) -> str:
        return f"invoice for order {self.order_id} (job {self.job_id} lease {self.run_lease})"
