/* swfs: kernel passthrough (libfuse >= 3.17) and a tight receive loop.
 * Builds against older libfuse too: there passthrough is reported absent. */
#ifndef PYFUSE3_FASTPATH_H
#define PYFUSE3_FASTPATH_H
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <time.h>
#include <fuse_lowlevel.h>

#ifdef FUSE_CAP_PASSTHROUGH
#define PYFUSE3_HAVE_PASSTHROUGH 1
static int pyfuse3_want_passthrough(struct fuse_conn_info *conn) {
    if (!(conn->capable & FUSE_CAP_PASSTHROUGH))
        return 0;
    conn->want |= FUSE_CAP_PASSTHROUGH;
    /* the backing file may itself sit on one stacked file system (overlayfs) */
    conn->max_backing_stack_depth = 1;
    return 1;
}
/* The kernel's FUSE_DEV_IOC_BACKING_OPEN/CLOSE (linux/fuse.h, 6.9+), on the
 * session fd: usable outside a request, so one id can serve every open of
 * an inode (the kernel refuses two backing files for one inode). */
struct pyfuse3_backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define PYFUSE3_IOC_BACKING_OPEN _IOW(229, 1, struct pyfuse3_backing_map)
#define PYFUSE3_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)
static int pyfuse3_backing_open(int devfd, int fd) {
    struct pyfuse3_backing_map map = { .fd = fd };
    int id = ioctl(devfd, PYFUSE3_IOC_BACKING_OPEN, &map);
    return id < 0 ? -errno : id;
}
static int pyfuse3_backing_close(int devfd, int id) {
    uint32_t bid = (uint32_t)id;
    return ioctl(devfd, PYFUSE3_IOC_BACKING_CLOSE, &bid) < 0 ? -errno : 0;
}
static void pyfuse3_set_backing(struct fuse_file_info *fi, int id) {
    fi->backing_id = id;
}
#else
#define PYFUSE3_HAVE_PASSTHROUGH 0
static int pyfuse3_want_passthrough(struct fuse_conn_info *conn) { return 0; }
static int pyfuse3_backing_open(int devfd, int fd) { return -ENOSYS; }
static int pyfuse3_backing_close(int devfd, int id) { return -ENOSYS; }
static void pyfuse3_set_backing(struct fuse_file_info *fi, int id) { }
#endif

static int pyfuse3_set_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

static double pyfuse3_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Receive the next request from a non-blocking session fd, retrying for up
 * to `window` seconds while none is queued.  Called without the GIL: the
 * caller's next request usually follows the reply within tens of
 * microseconds, and picking it up here costs a read(2) where a trip through
 * the event loop costs a pass of Python scheduling and an epoll wake-up. */
static int pyfuse3_receive_spin(struct fuse_session *se, struct fuse_buf *buf,
                                double window) {
    int res = fuse_session_receive_buf(se, buf);
    if (res != -EAGAIN || window <= 0)
        return res;
    double until = pyfuse3_now() + window;
    while (res == -EAGAIN && !fuse_session_exited(se)) {
        if (pyfuse3_now() >= until)
            break;
        res = fuse_session_receive_buf(se, buf);
    }
    return res;
}

/* FUSE_TMPFILE (open(dir, O_TMPFILE)): the low-level operation exists from
 * libfuse 3.17 on; built against an older one it is reported absent and the
 * kernel is answered ENOSYS, as before. */
typedef void (*pyfuse3_tmpfile_fn)(fuse_req_t, fuse_ino_t, mode_t,
                                   struct fuse_file_info *);
#if FUSE_MAJOR_VERSION > 3 || (FUSE_MAJOR_VERSION == 3 && FUSE_MINOR_VERSION >= 17)
#define PYFUSE3_HAVE_TMPFILE 1
static void pyfuse3_set_tmpfile(struct fuse_lowlevel_ops *ops, pyfuse3_tmpfile_fn fn) {
    ops->tmpfile = fn;
}
#else
#define PYFUSE3_HAVE_TMPFILE 0
static void pyfuse3_set_tmpfile(struct fuse_lowlevel_ops *ops, pyfuse3_tmpfile_fn fn) { }
#endif
#endif
