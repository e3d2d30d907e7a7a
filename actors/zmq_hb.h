/*
 * ThreadSanitizer cannot see inside libzmq (not instrumented), so it misses
 * the happens-before edge a message carries from sender to receiver and
 * reports the receiver's reads of the message's bytes as races. These two
 * annotations state that edge; they compile to nothing in other builds.
 */
#ifndef SCHEDRUN_ZMQ_HB_H
#define SCHEDRUN_ZMQ_HB_H

#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define HB_SEND(p) __tsan_release(p)
#define HB_RECV(p) __tsan_acquire(p)
#else
#define HB_SEND(p) ((void)(p))
#define HB_RECV(p) ((void)(p))
#endif

#endif
