"""_vllm_leases.py — lookup leases: what get_num_new_matched_tokens counts stays loadable.

vLLM's base class says the lookup "must not count tokens that cannot be
loaded", and under vLLM's default kv_load_failure_policy="fail" a block the
worker then cannot load finishes the request with an error. So every chunk
the scheduler-side connector counts is held by a lease of its request until
the worker has read it:

- What is counted is in kvact's L1 and pinned there, for every TP rank's key
  (kva_lookup with pin: no eviction, demand or watermark, takes it). A chunk
  found only in an L2 tier is first brought into L1 (a prefetch, whose read
  locks become pins once it is done) and the lookup answers None, "ask again
  later", meanwhile: vLLM keeps the request waiting one more step. A tier
  that fails after that no longer matters: the bytes are in L1. Bringing a
  chunk in needs its layout, which the workers send with their first step's
  report (build_connector_worker_meta): until then only L1 hits count.
- Only what is worth loading is counted (issue 30, docs/load-plan.md): once
  the layout is known the lookup is kva_plan_load, and L2 hits that would
  arrive later than the engine could compute them are neither brought in
  nor counted (stats skipped_slow_tokens); the warm-up prefetch of the rest
  is submitted as planned, so the storage's load_or_recompute policy does
  not judge it again. In a client of kvactd kva_plan_load answers
  KVA_ENOTSUP: the lookup is a plain one and kvactd's own prefetch policy,
  if it is load_or_recompute, cuts the warm-up prefetch instead.
- One lease per request: asking again for the same keys gives the same
  answer and takes nothing more; other keys (a preempted request that grew)
  take a new lease first, then give the old one back.
- Released: at commit (update_state_after_alloc), every chunk outside the
  load vLLM allocated (none when it allocated 0 tokens); the rest once every
  worker reported the load as done (the workers' build_connector_worker_meta,
  in update_connector_output); all of it when the request finishes or is
  aborted (request_finished) and at shutdown.
- A lease that was never committed expires after lease_s (vLLM may look a
  request up and never schedule it): it is given back at the next scheduler
  call, counted (stats "lease_expiries") and logged once per connector.
- In a client of kvactd pins belong to the connection: a scheduler process
  that dies loses its leases with it.

Pins are not read locks: the connector's own reset_cache spares leased
chunks (deleting them when their lease goes), but an operator's forced
kva_delete / kva_clear still removes them, and such a chunk is then a load
error like a tier failing mid-load.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import kvact

log = logging.getLogger("kvact.integrations.vllm")

_ENOTSUP = -7  # KVA_ENOTSUP: kva_plan_load in a client of kvactd


@dataclass
class Lease:
    """One request's lease: chunks [lo, hi) of keys are pinned for every rank."""

    keys: list              # kv_rank 0 keys the lookup asked for
    lo: int = 0
    hi: int = 0             # pinned chunks [lo, hi); hi - lo is also the hit while warming is None
    born: float = 0.0
    committed: bool = False
    reports: int = 0        # workers that reported the load done
    warming: list = field(default_factory=list)  # (rank, PrefetchHandle) bringing L2 hits in
    warm_hi: int = 0        # chunk the warming prefetches end at
    from_l2: int = 0        # chunks [l2_lo, l2_lo + from_l2) came from L2 tier l2_tier
    l2_lo: int = 0
    l2_tier: str = ""


class LeaseTable:
    """The scheduler side's leases, by request id (see the module docstring)."""

    def __init__(self, storage, ranks, lease_s, ranked, on_expiry, plan=True, on_skip=None):
        self._sm, self._ranks, self._lease_s = storage, ranks, lease_s
        self._ranked = ranked          # (keys, rank) -> those keys of that TP rank
        self._on_expiry = on_expiry    # called once per expired lease (stats)
        self._plan = plan              # kva_plan_load once the layout is known (else lookup)
        self._on_skip = on_skip        # called with the chunks a lookup skipped as slow
        self.layout = None             # the chunks' MemoryLayoutDesc, once a worker said
        self._leases = {}
        self._doomed = set()           # reset_cache's keys kept while leased
        self._warned = False

    def __len__(self):
        return len(self._leases)

    def get(self, req_id):
        return self._leases.get(req_id)

    # ---- taking ------------------------------------------------------------------------
    def lookup(self, req_id, keys):
        """The chunks of keys the request may count (pinned), or None while an L2 hit is
        being brought into L1."""
        now = time.monotonic()
        keys = self._cut_doomed(keys)
        old = self._leases.get(req_id)
        if old is not None and self._expired(old, now):  # the others go at the step's end
            self._expire(req_id)
            old = None
        if old is not None and not old.committed and old.keys == keys:
            if old.warming:
                return self._warmed(old)
            return old.hi
        lease = Lease(keys, born=now)
        self._take(lease)  # all or nothing
        if old is not None:  # taken before given back: no gap a chunk could leave by
            self._give_back(old)
        self._leases[req_id] = lease
        return None if lease.warming else lease.hi

    def _take(self, lease):
        """Pins the L1 prefix of keys on every rank (exactly: a lookup that raises gives
        back the pins of the ranks before it); starts bringing the L2 hits after it that
        are worth loading into L1 when every rank has them."""
        keys = lease.keys
        if not keys:
            return
        found = []  # per rank: (L1 hits pinned, hits worth counting, hits over all tiers)
        try:
            for rank in range(self._ranks):
                res, worth = self._find(self._ranked(keys, rank))
                found.append((res.tiers.get("L1", 0), worth, res.total))
                if not lease.l2_tier:
                    lease.l2_tier = next((t for t, n in res.tiers.items() if t != "L1" and n), "")
        except BaseException:
            for rank, (hits, _, _) in enumerate(found):
                if hits:
                    self._sm.unpin(self._ranked(keys[:hits], rank))
            raise
        l1 = min(hits for hits, _, _ in found)
        worth = max(l1, min(w for _, w, _ in found))
        skipped = min(t for _, _, t in found) - worth
        if skipped > 0 and self._on_skip is not None:
            self._on_skip(skipped)
        for rank, (hits, _, _) in enumerate(found):  # every rank keeps [0, l1)
            if hits > l1:
                self._sm.unpin(self._ranked(keys[l1:hits], rank))
        lease.hi = l1
        if worth > l1 and self.layout is not None:
            try:
                lease.warm_hi = worth
                for rank in range(self._ranks):
                    handle = self._prefetch(self._ranked(keys[l1:worth], rank))
                    if handle is None:  # a rank refused: no L2 hit this time
                        self._stop_warming(lease)
                        break
                    lease.warming.append((rank, handle))
            except BaseException:
                self._give_back(lease)
                raise

    def _find(self, keys):
        """(a LookupResult of keys, with their L1 hits pinned; how many from the first are
        worth counting): the load plan's worth once the layout is known, else every hit.
        Pins only on success, as lookup does."""
        if self._plan and self.layout is not None:
            try:
                plan = self._sm.plan_load(keys, self.layout, pin=True)
                return plan.found, plan.worth
            except kvact.KvactError as e:
                if e.status != _ENOTSUP:
                    raise
                self._plan = False  # a client of kvactd: its prefetch policy decides
                log.info("kvact lease: no load plan in a client of kvactd (%s); kvactd's "
                         "prefetch_policy decides what a warm-up loads", e)
        res = self._sm.lookup(keys, pin=True)
        return res, res.total

    def _prefetch(self, keys):
        """The warm-up of keys judged worth loading: as planned when the plan judged them
        (a plain prefetch in a client of kvactd, where kvactd's policy judges)."""
        try:
            return self._sm.submit_prefetch_task(keys, self.layout, as_planned=self._plan)
        except kvact.KvactError as e:
            log.warning("kvact lease: prefetch from L2 refused: %s", e)
            return None

    def _warmed(self, lease):
        """None while the L2 prefetches run; then what they brought is pinned (the prefix
        every rank has) and their read locks given back: the lease's hit."""
        if not all(_done(handle) for _, handle in lease.warming):
            return None
        lo, pinned = lease.hi, []
        for rank, handle in lease.warming:
            try:
                hits = handle.wait()
            except kvact.KvactError as e:  # nothing locked
                log.warning("kvact lease: prefetch from L2 failed: %s", e)
                hits = 0
            ranked = self._ranked(lease.keys[lo:lo + hits], rank)
            got = self._sm.lookup(ranked, pin=True).tiers.get("L1", 0) if hits else 0
            pinned.append(got)
            if hits:
                self._sm.finish_read_prefetched(ranked)
        common = min(pinned)
        for (rank, _), got in zip(lease.warming, pinned):
            if got > common:
                self._sm.unpin(self._ranked(lease.keys[lo + common:lo + got], rank))
        lease.warming, lease.warm_hi = [], 0
        lease.hi, lease.from_l2, lease.l2_lo = lo + common, common, lo
        return lease.hi

    def _stop_warming(self, lease):
        for _, handle in lease.warming:
            handle.close()  # the read locks go back when (if) the load ends
        lease.warming, lease.warm_hi = [], 0

    # ---- committing and releasing ------------------------------------------------------
    def commit(self, req_id, first, last):
        """update_state_after_alloc: the load reads chunks [first, last); the pins of the
        others go back now. Nothing to load: the whole lease goes."""
        lease = self._leases.get(req_id)
        if lease is None:
            return
        if last <= first:
            self.release(req_id)
            return
        first, last = max(first, lease.lo), min(last, lease.hi)
        self._unpin(lease, lease.lo, first)
        self._unpin(lease, last, lease.hi)
        lease.lo, lease.hi, lease.committed = first, max(first, last), True

    def loaded(self, req_id, workers):
        """Workers reported the request's load done: released once every rank did."""
        lease = self._leases.get(req_id)
        if lease is None or not lease.committed:
            return
        lease.reports += workers
        if lease.reports >= self._ranks:
            self.release(req_id)

    def release(self, req_id):
        lease = self._leases.pop(req_id, None)
        if lease is not None:
            self._give_back(lease)
            if self._doomed:
                self._delete_doomed()

    def expire(self, now=None):
        """Gives back every lease past its time (build_connector_meta: once a step)."""
        now = time.monotonic() if now is None else now
        for rid in [rid for rid, lease in self._leases.items() if self._expired(lease, now)]:
            self._expire(rid)

    def _expired(self, lease, now):
        return not lease.committed and now - lease.born > self._lease_s

    def _expire(self, rid):
        if not self._warned:
            log.warning("kvact: the lookup lease of request %s expired after %.1f s "
                        "(vLLM looked it up and did not schedule it); its chunks may be "
                        "evicted again (logged once; stats lease_expiries counts them)",
                        rid, self._lease_s)
            self._warned = True
        self.release(rid)
        self._on_expiry()

    def close(self):
        for rid in list(self._leases):
            self.release(rid)

    def _give_back(self, lease):
        self._stop_warming(lease)
        self._unpin(lease, lease.lo, lease.hi)
        lease.lo = lease.hi = 0

    def _unpin(self, lease, lo, hi):
        if hi > lo:
            for rank in range(self._ranks):
                self._sm.unpin(self._ranked(lease.keys[lo:hi], rank))

    # ---- reset_cache -------------------------------------------------------------------
    def leased_keys(self):
        """kv_rank 0 keys under a lease (pinned or being warmed)."""
        out = set()
        for lease in self._leases.values():
            out.update(lease.keys[lease.lo:max(lease.hi, lease.warm_hi)])
        return out

    def doom(self, keys):
        """reset_cache: keys to delete once no lease holds them; lookups count none of
        them meanwhile."""
        self._doomed.update(keys)

    def _cut_doomed(self, keys):
        if self._doomed:
            for i, key in enumerate(keys):
                if key in self._doomed:
                    return keys[:i]
        return keys

    def _delete_doomed(self):
        """Deletes the doomed keys no lease holds any more."""
        held = self.leased_keys()
        keys = [k for k in self._doomed if k not in held]
        if not keys:
            return
        self._doomed.difference_update(keys)
        for rank in range(self._ranks):
            try:
                self._sm.delete(self._ranked(keys, rank), force=True)
            except kvact.KvactError as e:
                log.warning("kvact reset_cache: deferred delete refused: %s", e)


def _done(handle):
    """Whether a prefetch has ended (a failed one has: wait() then raises)."""
    try:
        return handle.query() is not None
    except kvact.KvactError:
        return True
