# The newcomer's commands. Each one creates .venv (Python >= 3.12) and installs the project
# on first use, then runs against $DATABASE_URL if set, else an embedded PostgreSQL kept
# in .pgdata/ (started for the command, stopped afterwards).
#
#   make demo     migrate, start a worker, run the example jobs, print what happened
#   make test     ruff, format check, makemigrations --check, mypy, import contracts, pytest
#   make admin    migrate and serve the admin on http://127.0.0.1:8000/admin/
#   make db-start / db-stop / db-status   keep the embedded PostgreSQL running by hand

VENV ?= .venv
VPY := $(VENV)/bin/python
PGENV := $(VPY) devtools/pgenv.py
# PYTHON=/path/to/python3.12 picks the interpreter that creates $(VENV).
PYTHON ?=
# Extra pytest arguments, e.g. make test PYTEST_ARGS="tests/unit -x"
PYTEST_ARGS ?=

.PHONY: venv demo test admin worker db-start db-stop db-status clean-db

venv:
	@VENV="$(VENV)" PYTHON="$(PYTHON)" bash devtools/bootstrap.sh

demo: venv
	$(PGENV) -- sh -c '$(VPY) manage.py migrate --no-input -v 0 && exec $(VPY) manage.py awa_demo'

test: venv
	$(PGENV) -- $(VPY) devtools/check.py $(PYTEST_ARGS)

admin: venv
	$(PGENV) -- sh -c '$(VPY) manage.py migrate --no-input -v 0 && exec $(VPY) manage.py runserver --noreload 127.0.0.1:8000'

worker: venv
	$(PGENV) -- sh -c '$(VPY) manage.py migrate --no-input -v 0 && exec $(VPY) manage.py awa_worker'

db-start: venv
	$(PGENV) --start

db-stop: venv
	$(PGENV) --stop

db-status: venv
	$(PGENV) --status

clean-db: db-stop
	rm -rf .pgdata
