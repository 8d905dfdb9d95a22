"""The demo shop's one table: invoices, written by the atomic `create_invoice` handler."""

from __future__ import annotations

from django.db import models


class Invoice(models.Model):
    order_id = models.BigIntegerField(unique=True)
    amount_cents = models.IntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"invoice {self.pk} for order {self.order_id}"
