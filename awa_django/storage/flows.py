"""A job's flow, read-only, for operators (docs/workflows.md, "Admin"): the jobs connected
to it through dependency edges, in either direction, bounded in size, with their live
states; and the batch a job belongs to. Plain ORM on the workflow tables' two indexes
(the edges' primary key leads with `parent_id`, `awa_job_deps_child_idx` serves
`child_id`), each step one query: a flow of any size costs at most `depth` edge reads and
one read of the jobs it shows. Surfaces reach it through `Client.job_flow()`."""

from __future__ import annotations

from django.db.models import Q

from awa_django.snapshot import DEAD_LETTERED, GONE, FlowNode, JobFlow, JobWaiting
from awa_django.storage.models import DeadLetter, Job
from awa_django.storage.workflows import Batch, BatchMember, JobDependency, JobWait


def job_flow(job_id: int, *, using: str, limit: int, depth: int) -> JobFlow | None:
    """The flow around job `job_id`, or None when there is no such job (in the table or
    among the dead letters)."""
    if not _exists(job_id, using):
        return None
    edges, truncated = _reach(job_id, using, limit, depth)
    kept = {job_id} | {p for p, _ in edges} | {c for _, c in edges}
    return JobFlow(
        job_id=job_id,
        nodes=_nodes(kept, edges, using),
        truncated=truncated,
        parent_count=JobDependency.objects.using(using).filter(child_id=job_id).count(),
        child_count=JobDependency.objects.using(using).filter(parent_id=job_id).count(),
        waiting=_waiting(job_id, using),
        batch_id=job_batch(job_id, using=using),
    )


def job_batch(job_id: int, *, using: str) -> int | None:
    """The batch job `job_id` is a member of, or whose callback it is; None if neither."""
    member = BatchMember.objects.using(using).filter(job_id=job_id).values_list("batch_id")
    if found := member.first():
        return int(found[0])
    callback = Batch.objects.using(using).filter(Q(on_success_id=job_id) | Q(on_complete_id=job_id))
    batch_id = callback.values_list("id", flat=True).first()
    return None if batch_id is None else int(batch_id)


def job_nodes(job_ids: list[int], *, using: str) -> list[FlowNode]:
    """Jobs `job_ids` as nodes without edges, in the order given."""
    nodes = {n.id: n for n in _nodes(set(job_ids), set(), using)}
    return [nodes[i] for i in job_ids]


def _exists(job_id: int, using: str) -> bool:
    return (
        Job.objects.using(using).filter(id=job_id).exists()
        or DeadLetter.objects.using(using).filter(id=job_id).exists()
    )


def _reach(job_id: int, using: str, limit: int, depth: int) -> tuple[set[tuple[int, int]], bool]:
    """Breadth first from the job over edges in both directions: the edges among the first
    `limit` jobs reached, and whether any job was left out. Each step reads at most
    `limit` edges more than it can keep, so a job with 10,000 parents costs one bounded
    read, not 10,000 rows."""
    seen, frontier = {job_id}, {job_id}
    edges: set[tuple[int, int]] = set()
    truncated = False
    for _ in range(depth):
        if not frontier:
            break
        room = limit - len(seen)
        touching = Q(parent_id__in=frontier) | Q(child_id__in=frontier)
        found = list(
            JobDependency.objects.using(using)
            .filter(touching)
            .order_by("parent_id", "child_id")
            .values_list("parent_id", "child_id")[: room + limit + 1]
        )
        truncated |= len(found) > room + limit
        frontier = set()
        for parent, child in found:
            new = {parent, child} - seen
            if len(seen) + len(new) > limit:
                truncated = True
                continue
            seen |= new
            frontier |= new
            edges.add((parent, child))
    return edges, truncated or (bool(frontier) and _has_more(frontier, seen, using))


def _has_more(frontier: set[int], seen: set[int], using: str) -> bool:
    """Whether the last step's jobs have edges to jobs not shown (depth ran out)."""
    outward = JobDependency.objects.using(using).filter(
        Q(parent_id__in=frontier) & ~Q(child_id__in=seen)
        | Q(child_id__in=frontier) & ~Q(parent_id__in=seen)
    )
    return outward.exists()


def _nodes(ids: set[int], edges: set[tuple[int, int]], using: str) -> tuple[FlowNode, ...]:
    rows = {
        row["id"]: (row["kind"], row["queue"], row["state"])
        for row in Job.objects.using(using)
        .filter(id__in=ids)
        .values("id", "kind", "queue", "state")
    }
    missing = ids - rows.keys()
    if missing:
        dead = DeadLetter.objects.using(using).filter(id__in=missing)
        for row in dead.values("id", "kind", "queue"):
            rows[row["id"]] = (row["kind"], row["queue"], DEAD_LETTERED)
    parents: dict[int, list[int]] = {i: [] for i in ids}
    for parent, child in edges:
        parents[child].append(parent)
    generations = _generations(parents)
    nodes = [
        FlowNode(i, *rows.get(i, ("", "", GONE)), tuple(sorted(parents[i])), generations[i])
        for i in ids
    ]
    return tuple(sorted(nodes, key=lambda n: (n.generation, n.id)))


def _generations(parents: dict[int, list[int]]) -> dict[int, int]:
    """Longest path from a root, over the shown edges (parents exist before their children,
    so the edges form no cycle: each job is settled once its parents are)."""
    generation: dict[int, int] = {}
    pending = sorted(parents)  # ids ascend with enqueue order: parents come first
    while pending:
        later = []
        for job in pending:
            if all(p in generation for p in parents[job]):
                generation[job] = 1 + max((generation[p] for p in parents[job]), default=-1)
            else:
                later.append(job)
        if len(later) == len(pending):  # unreachable: no cycles; never loop forever
            generation.update(dict.fromkeys(later, 0))
            break
        pending = later
    return generation


def _waiting(job_id: int, using: str) -> JobWaiting | None:
    row = (
        JobWait.objects.using(using)
        .filter(job_id=job_id)
        .values_list("pending_parents", "failed_parents", "on_parent_failure")
        .first()
    )
    return None if row is None else JobWaiting(*row)
