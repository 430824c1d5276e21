/* A stand-in for a library that registers its own SIGINT handler the way LLVM does (PoCL's compiler
 * links it): register saves the handler it finds and installs its own (SA_NODEFER | SA_RESETHAND);
 * on the signal, its handler reinstalls the saved one and raises the signal again.
 * Built by tests/api/test_interrupt.py into a temporary directory and loaded through ctypes. */
#include <signal.h>
#include <string.h>

static struct sigaction saved;
static volatile sig_atomic_t registered;

static void on_signal(int sig)
{
    if (registered) {
        sigaction(SIGINT, &saved, NULL);
        registered = 0;
    }
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, NULL);
    raise(sig);
}

void shim_register(void)
{
    if (registered)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_NODEFER | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &saved);
    registered = 1;
}
