/* The pod sandbox's process for the realnode tier: holds the pod's namespaces, reaps orphans, and leaves on
 * SIGINT or SIGTERM. Written for this tier; built static with gcc into a one-layer image (node.py). */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void leave(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, 0, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction action = {0};
    action.sa_handler = leave;
    sigaction(SIGINT, &action, 0);
    sigaction(SIGTERM, &action, 0);
    action.sa_handler = reap;
    action.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigaction(SIGCHLD, &action, 0);
    for (;;)
        pause();
}
