/*
 * When a waiting thread stops spinning.
 *
 * A thread that expects a message within microseconds polls for it a while,
 * yielding between looks, before it sleeps: waking a sleeping thread costs
 * more than that. The poll pays only while the thread has a core to itself.
 * Where cores are shared with other busy threads, its sched_yield hands the
 * core to one of them for a whole time slice (milliseconds), and what it
 * waits for waits that long too: a sender does not wake a thread that polls.
 *
 * A gauge, one per process (its waiting threads share what they learn; a
 * race between two of them only blurs a heuristic), notices it: a look that came back more
 * than SPIN_GAP_NS after the one before means that a time slice went to
 * another thread. The spin stops there, and none starts for a quiet time:
 * SPIN_QUIET_MIN_NS after a lone lost slice, doubling up to
 * SPIN_QUIET_MAX_NS while they keep coming (a lost slice within
 * 2 x SPIN_QUIET_MAX_NS of the one before). One stray gap (a virtual
 * machine's host taking the core a moment) costs a millisecond of waits
 * that sleep; busy neighbours that take every slice keep the waits asleep,
 * with one try at spinning every 100 ms.
 *
 * One wait ignores it: a host device's worker after a lone job's request
 * spins through its window anyway (gpu/host/host_worker.c), since a loop
 * that submits and waits posts the next one microseconds later.
 *
 * Header-only and plain C with standard includes only: the host devices'
 * worker program, compiled at run time, carries a copy of this text.
 */
#ifndef SCHEDRUN_SPIN_GAUGE_H
#define SCHEDRUN_SPIN_GAUGE_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SPIN_GAP_NS 1000000ull          /* a yield this long: a time slice went to another thread */
#define SPIN_QUIET_MIN_NS 1000000ull    /* then no spin for 1 ms, */
#define SPIN_QUIET_MAX_NS 100000000ull  /* doubling up to 100 ms while it goes on */

typedef struct spin_gauge {
  _Atomic uint64_t quiet_until; /* no spin before this time (ns, the caller's clock) */
  _Atomic uint64_t quiet_ns;    /* the quiet time the last lost slice started */
  _Atomic uint64_t lost_at;     /* when that was */
} spin_gauge;

/* May a wait that starts at `now` spin? */
static inline bool spin_gauge_may_spin(spin_gauge *g, uint64_t now) {
  return now >= atomic_load_explicit(&g->quiet_until, memory_order_relaxed);
}

/* One look of a spin, from `before` to `after`: true to go on spinning;
 * false when it shows the thread lost its core (and then no spin for a
 * while). */
static inline bool spin_gauge_step(spin_gauge *g, uint64_t before, uint64_t after) {
  if (after - before <= SPIN_GAP_NS) return true;
  uint64_t q = atomic_load_explicit(&g->quiet_ns, memory_order_relaxed);
  bool again = q && after - atomic_load_explicit(&g->lost_at, memory_order_relaxed) < 2 * SPIN_QUIET_MAX_NS;
  q = !again ? SPIN_QUIET_MIN_NS : q >= SPIN_QUIET_MAX_NS / 2 ? SPIN_QUIET_MAX_NS : 2 * q;
  atomic_store_explicit(&g->quiet_ns, q, memory_order_relaxed);
  atomic_store_explicit(&g->lost_at, after, memory_order_relaxed);
  atomic_store_explicit(&g->quiet_until, after + q, memory_order_relaxed);
  return false;
}

/* One look of a spin: yields the core, then reads the caller's clock into
 * *look; true to go on spinning (spin_gauge_step on the yield). */
static inline bool spin_gauge_yield(spin_gauge *g, uint64_t *look, uint64_t (*now)(void)) {
  sched_yield(); /* a spinning thread must not keep a core from one with work */
  uint64_t after = now();
  bool go = spin_gauge_step(g, *look, after);
  *look = after;
  return go;
}

/* The library's: its threads' waits all learn from one another. */
extern spin_gauge spin_gauge_process;

#endif
