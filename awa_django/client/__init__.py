"""The Client: the one way to change a job or a queue (enqueue, operator actions, callback
resolution), on Django's connection so it joins the caller's transaction."""

from awa_django.client.client import Client, aenqueue, aenqueue_many, enqueue, enqueue_many

__all__ = ["Client", "aenqueue", "aenqueue_many", "enqueue", "enqueue_many"]
