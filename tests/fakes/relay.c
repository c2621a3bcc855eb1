/* A process that talks to gpushared's socket on a test's behalf, so that a test has an attached
 * process other than itself (one it may see killed): it connects to SOCKET, copies its stdin to
 * the socket and the socket to its stdout, and exits when the socket closes. The end of stdin
 * does not end it: the process stays attached until it is killed or the daemon lets it go.
 *
 * usage: relay SOCKET
 * Build: gcc -o relay relay.c
 */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int copy(int from, int to) {
    char buf[4096];
    ssize_t n = read(from, buf, sizeof buf), off = 0;
    if (n <= 0) return -1;
    while (off < n) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w <= 0) return -1;
        off += w;
    }
    return 0;
}

int main(int argc, char **argv) {
    struct sockaddr_un addr;
    struct pollfd fds[2];
    int sock, stdin_open = 1;
    if (argc != 2 || strlen(argv[1]) >= sizeof addr.sun_path) {
        fprintf(stderr, "usage: relay SOCKET\n");
        return 2;
    }
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    strcpy(addr.sun_path, argv[1]);
    sock = socket(AF_UNIX, SOCK_STREAM, 0);
    if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("relay: connect");
        return 1;
    }
    for (;;) {
        fds[0].fd = stdin_open ? 0 : -1;
        fds[0].events = POLLIN;
        fds[1].fd = sock;
        fds[1].events = POLLIN;
        if (poll(fds, 2, -1) < 0) return 1;
        if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (copy(sock, 1) != 0) return 0;
        }
        if (stdin_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            if (copy(0, sock) != 0) stdin_open = 0;
        }
    }
}
