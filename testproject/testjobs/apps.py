from django.apps import AppConfig


class TestJobsConfig(AppConfig):
    """Jobs the acceptance tests run in real worker processes."""

    name = "testproject.testjobs"
    label = "testjobs"
