"""Django's `django.tasks` running on awa: the backend (enqueue, results) and the runner
(handlers for task kinds, Django's task signals)."""
