// ThreadSanitizer annotations for hand-offs it cannot see. Two threads of one process that
// talk over the shared-memory transport each map the same FIFO at an address of their own, so
// the release and the acquire that order a message fall on different addresses for it; where
// the message only says where the data are (a receiver copying straight from the sender's
// buffer), it would report that copy as a race. Outside a ThreadSanitizer build these are
// nothing.
#pragma once

#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define DCOMM_TSAN_ACQUIRE(p) __tsan_acquire(const_cast<void*>(static_cast<const volatile void*>(p)))
#define DCOMM_TSAN_RELEASE(p) __tsan_release(const_cast<void*>(static_cast<const volatile void*>(p)))
#else
#define DCOMM_TSAN_ACQUIRE(p) ((void)0)
#define DCOMM_TSAN_RELEASE(p) ((void)0)
#endif
