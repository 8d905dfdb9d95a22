import pytest
from django.urls import reverse
from tests.integration.test_admin import WorkerInstanceFactory
from awa_django import queues
pytestmark = pytest.mark.django_db
def test_x(admin_client):
    w = WorkerInstanceFactory(hostname="web-1.internal", pid=4242, leader=True)
    w.refresh_from_db()
    print("ROW", w.last_seen_at, w.queues, queues.live_workers())
    text = admin_client.get(reverse("admin:awa_django_dashboard")).content.decode()
    i = text.find("Live workers")
    print(text[i:i+2500])
