"""The HTTP surface: signed callback requests (signing, views, URLconf)."""
