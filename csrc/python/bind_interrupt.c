/* Ctrl-C during long kernels: see bind_interrupt.h. */
#include "python/bindings.h"
#include "python/bind_interrupt.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030D0000
/* 3.13 moved its declaration to the internal headers (pycore_signal.h); the function is still exported
 * (PyAPI_FUNC) and is the interpreter's own test of the thread that handles signals. */
PyAPI_FUNC(int) _PyOS_IsMainThread(void);
#endif

typedef struct {
    int active; /* ours installed by this begin; the handler to put back is g_previous */
} pf_sigint_guard;

static pf_cancel g_cancel;
static struct sigaction g_previous; /* the handler chained to; read by the signal handler */
static volatile sig_atomic_t g_installed;

static void sigint_handler(int sig, siginfo_t *info, void *uctx)
{
    int saved = errno;
    atomic_store_explicit(&g_cancel.flag, 1, memory_order_relaxed);
    /* forward to the previous handler (Python's marks the signal pending) */
    if (g_previous.sa_flags & SA_SIGINFO) {
        if (g_previous.sa_sigaction)
            g_previous.sa_sigaction(sig, info, uctx);
    } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler) {
        g_previous.sa_handler(sig);
    }
    errno = saved;
}

static pf_cancel *pf_sigint_begin(pf_sigint_guard *g)
{
    g->active = 0;
    if (g_installed || !_PyOS_IsMainThread())
        return NULL; /* signals are handled by the main thread only; no nesting */
    struct sigaction cur;
    if (sigaction(SIGINT, NULL, &cur) != 0)
        return NULL;
    if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN))
        return NULL; /* no handler to chain to: Ctrl-C keeps its default meaning */
    atomic_store_explicit(&g_cancel.flag, 0, memory_order_relaxed);
    if (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != sigint_handler)
        g_previous = cur; /* never chain to ourselves (we would recurse on the signal) */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = sigint_handler;
    sa.sa_flags = SA_SIGINFO | (cur.sa_flags & (SA_ONSTACK | SA_RESTART));
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0)
        return NULL;
    g->active = 1;
    g_installed = 1;
    return &g_cancel;
}

static int pf_sigint_end(pf_sigint_guard *g, int interrupted)
{
    if (!g->active)
        return 0;
    /* Put the previous handler back where ours is still installed, or where no signal came. LLVM's
     * handler (PoCL's compiler registers it, also during a call) saves the one it finds and, on the
     * signal, reinstalls that and re-raises: kept after a signal, or left on top of ours, it would
     * chain back to ours, and the next SIGINT recursed until the stack overflowed. */
    struct sigaction cur;
    const int ours = sigaction(SIGINT, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
                     cur.sa_sigaction == sigint_handler;
    if (ours || !atomic_load_explicit(&g_cancel.flag, memory_order_relaxed))
        sigaction(SIGINT, &g_previous, NULL);
    g->active = 0;
    g_installed = 0;
    if (!interrupted)
        return 0; /* a signal that came late stays pending for the interpreter */
    if (PyErr_CheckSignals() < 0)
        return -1;
    return 1;
}

pf_status pf_sigint_run(pf_status (*call)(void *ctx, pf_cancel *cancel), void *ctx)
{
    pf_status status;
    pf_sigint_guard guard;
    do {
        pf_cancel *cancel = pf_sigint_begin(&guard);
        pf_clear_error();
        Py_BEGIN_ALLOW_THREADS
        status = call(ctx, cancel);
        Py_END_ALLOW_THREADS
    } while (pf_sigint_end(&guard, status == PF_EINTR) > 0);
    return status;
}
