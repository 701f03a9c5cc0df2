/* rcoll-info: version, build configuration, transports (compiled in and
 * usable here), algorithms, and every RCOLL_* parameter with its value. */
#include "config.h"
#include "coll/sched.h"
#include "cuda/rcuda.h"
#include "proto/memmon.h"
#include "transport/transport.h"
#include "util/params.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: rcoll-info [-v] [-c] [-a] [-t] [-m [N]] [-p PID] "
               "[-h]\n"
               "  (no option)  everything below\n"
               "  -v  version and build configuration\n"
               "  -t  transports compiled in, and whether usable here\n"
               "  -a  algorithms per collective (RCOLL_ALGO values)\n"
               "  -m  memory, threads and descriptors per communicator of N\n"
               "      ranks (default 8) with the current settings\n"
               "  -c  every RCOLL_* parameter: value, default, doc\n"
               "      (-c --markdown: docs/variables.md, with defaults)\n"
               "  -p  a running rank's communicators: operations in flight, "
               "each\n      transport's lanes with their counters, the "
               "registration cache's\n      (asks process PID through "
               "RCOLL_DUMP_SIGNAL)\n");
}

static void yesno(const char *what, int v, const char *note)
{
    printf("  %-8s %s%s%s\n", what, v ? "yes" : "no", note ? "  " : "",
           note ? note : "");
}

static void version(void)
{
    printf("rcoll %s\n", rcoll_version());
    printf("build:\n");
#ifdef HAVE_VERBS
    yesno("verbs", 1, "(the ib transport, with rdmacm)");
#else
    yesno("verbs", 0, NULL);
#endif
#ifdef HAVE_RDMACM
    yesno("rdmacm", 1, "(rdma_cm connections: iWARP/eRDMA, RoCE, IB)");
#else
    yesno("rdmacm", 0, NULL);
#endif
#ifdef HAVE_HWLOC
    yesno("hwloc", 1, "(topology detection: rcoll-topo, "
                      "RCOLL_TOPO_DUMP_FILE)");
#else
    yesno("hwloc", 0, NULL);
#endif
#ifdef HAVE_PMIX
    yesno("pmix", 1, "(rendezvous under mpirun/srun)");
#else
    yesno("pmix", 0, "(set RCOLL_ROOT under mpirun/srun)");
#endif
    if (rcoll_cuda_built()) {
        char note[384];
        snprintf(note, sizeof(note), "(GPU buffers in blocking calls, staged "
                 "through host memory; driver: %s)",
                 rcoll_cuda_available() ? "loaded" : rcoll_cuda_why());
        yesno("cuda", 1, note);
    } else {
        yesno("cuda", 0, "(buffers are host memory)");
    }
    printf("reduction kernels: %s\n", rcoll_reduce_isa());
}

static void transports(void)
{
    printf("transports:\n");
    for (int i = 0; rcoll_transports[i]; i++) {
        char why[256] = "";
        const rcoll_tl_ops_t *t = rcoll_transports[i];
        int u = t->usable(why, sizeof(why));
        int allowed = rcoll_config_name_allowed(rcoll_config.transports,
                                                t->name);
        printf("  %-6s %-8s %s%s%s\n", t->name,
               !u ? "unusable" : allowed ? "usable" : "excluded", t->doc,
               why[0] ? ": " : "", why);
        char lw[512] = "";
        if (u && t->lanes) {
            int nl = t->lanes(lw, sizeof(lw));
            printf("         lanes: %d %s\n", nl, lw);
        }
        if (u && t->describe)
            t->describe(stdout);
    }
    /* the registration caches (ib): kept only where freed memory is seen */
    char why[200] = "";
    int mon = rcoll_memmon_available(why, sizeof(why));
    printf("registration cache: %s, up to %zu bytes kept per device and "
           "communicator (RCOLL_RCACHE_MAX); ib sends from %zu bytes go "
           "zero-copy (RCOLL_IB_ZCOPY_MIN)%s%s\n",
           mon ? "on (userfaultfd sees freed and unmapped memory)"
               : "off: every use registers",
           rcoll_config.rcache_max, rcoll_config.ib_zcopy_min,
           mon ? "" : "; no monitor: ", why);
}

static void algorithms(void)
{
    printf("algorithms (RCOLL_ALGO=collective:name,...):\n");
    for (const coll_algo_t *a = coll_algos; a->name; a++)
        printf("  %-15s %-19s %s\n", coll_kind_name(a->kind), a->name, a->doc);
}

static void footprint(int n)
{
    size_t want = rcoll_config.chunk_size, worst = 0;
    int ns = rcoll_config.nslots, over = 0;
    /* all n on one host: the most shared-memory peers, the smallest chunk */
    size_t region = coll_area_region(rcoll_config.shm_area);
    size_t chunk = rcoll_tl_chunk_fit(want, ns, n - 1, region, &over);
    printf("memory per communicator of %d ranks (RCOLL_CHUNK_SIZE=%zu, "
           "RCOLL_NSLOTS=%d, RCOLL_SHM_BUDGET=%zu), the most one rank "
           "allocates:\n", n, want, ns, rcoll_config.shm_budget);
    if (over)
        printf("  chunk %zu bytes when all %d ranks share a host, and "
               "their receive rings still pass RCOLL_SHM_BUDGET (raise it "
               "or lower RCOLL_NSLOTS)\n", chunk, n);
    else if (chunk < want)
        printf("  chunk %zu bytes when all %d ranks share a host: their "
               "receive rings fit RCOLL_SHM_BUDGET (the chunk of every "
               "transport in that communicator)\n", chunk, n);
    rcoll_shm_plan_t plan;
    rcoll_shm_plan(chunk, ns, n - 1, 1, region, &plan);
    if (plan.pool)
        printf("  chunk %zu bytes when all %d ranks share a host: each "
               "rank's rings have %zu-byte slots and its segment a pool of "
               "%d chunk-sized slots its peers share (RCOLL_SHM_POOL), "
               "%.2f MiB in all\n", chunk, n, plan.ring_slot, plan.pool,
               plan.bytes / 1048576.0);
    for (int i = 0; rcoll_transports[i]; i++) {
        const rcoll_tl_ops_t *t = rcoll_transports[i];
        char what[512] = "";
        if (!t->peer_bytes)
            continue;
        size_t b = t->peer_bytes(chunk, ns, what, sizeof(what));
        if (t == &rcoll_tl_shm_ops && plan.pool && n > 1) {
            /* a small ring per peer, the pool shared: its share */
            b = (plan.bytes - region) / (size_t)(n - 1);
            snprintf(what, sizeof(what), "a receive ring of %d %zu-byte "
                     "slots per peer and a share of the pool of %d "
                     "%zu-byte slots, in this rank's /dev/shm segment",
                     ns, plan.ring_slot, plan.pool, chunk);
        }
        printf("  %-4s %10.2f MiB per peer, %10.2f MiB for %d peers: %s\n",
               t->name, b / 1048576.0, b * (double)(n - 1) / 1048576.0,
               n - 1, what);
        if (b > worst)
            worst = b;
    }
    printf("  bound: %.2f MiB (every peer on the costliest transport), plus "
           "a few KiB of state per peer (tcp: slot headers, about 0.3 MiB "
           "in all up to 33 ranks, 9 KiB per peer beyond)\n",
           worst * (double)(n - 1) / 1048576.0);
    if (rcoll_config.shm_area)
        printf("  shm  %10.2f MiB per rank, whatever the peers: its shared "
               "area (RCOLL_SHM_AREA, in its /dev/shm segment)\n",
               coll_area_region(rcoll_config.shm_area) / 1048576.0);
    printf("threads: 1 progress thread per communicator; 1 per process for "
           "RCOLL_DUMP_SIGNAL; 1 bootstrap root while a unique id is "
           "joined (rcoll_get_unique_id / rank 0)\n");
    printf("descriptors per communicator: an epoll and an eventfd; tcp: "
           "RCOLL_TCP_NSOCKS per peer; shm: one pidfd per peer; ib: a "
           "completion channel and an rdma_cm event channel; the bootstrap "
           "ring: 2\n");
}

/* Writes s with markdown's table and emphasis characters escaped. */
static void md_text(const char *s)
{
    for (; *s; s++) {
        if (*s == '|' || *s == '*' || *s == '_' || *s == '<' || *s == '[')
            putchar('\\');
        putchar(*s);
    }
}

/* docs/variables.md: the parameter table with defaults (not this process's
 * values), so the page is the same wherever it is made; make check compares
 * it with the committed page. */
static int params_markdown(void)
{
    for (int i = 0; i < rcoll_config_nparams(); i++)
        if (!*rcoll_config_param(i)->doc) {
            fprintf(stderr, "rcoll-info: %s has no documentation\n",
                    rcoll_config_param(i)->name);
            return 1;
        }
    printf("# Environment variables\n\n"
           "<!-- Generated by `rcoll-info -c --markdown` from the parameter "
           "table (src/util/params.c); `make check` fails when this page "
           "differs from it. -->\n\n"
           "Every `RCOLL_*` variable the library reads, in the order of its "
           "table. `rcoll-info -c` prints the same with the values in effect. "
           "Variables marked *same on every rank* shape schedules or "
           "messages: `rcoll_comm_init*` fails with "
           "`RCOLL_ERR_INVALID_ARGUMENT`, naming the variable, both values "
           "and both ranks, when ranks differ. Sizes take K, M and G "
           "suffixes.\n\n");
    printf("| variable | type | default | |\n| --- | --- | --- | --- |\n");
    for (int i = 0; i < rcoll_config_nparams(); i++) {
        const rcoll_param_info_t *p = rcoll_config_param(i);
        printf("| [`%s`](#%s) | %s | %s%s%s | %s |\n", p->name, p->name,
               p->type, *p->deflt ? "`" : "", p->deflt, *p->deflt ? "`" : "",
               rcoll_config_is_shared(i) ? "same on every rank" : "");
    }
    for (int i = 0; i < rcoll_config_nparams(); i++) {
        const rcoll_param_info_t *p = rcoll_config_param(i);
        printf("\n<a id=\"%s\"></a>\n**`%s`** (%s, default %s%s%s%s): ",
               p->name, p->name, p->type, *p->deflt ? "`" : "",
               *p->deflt ? p->deflt : "unset", *p->deflt ? "`" : "",
               rcoll_config_is_shared(i) ? "; same on every rank" : "");
        md_text(p->doc);
        printf("\n");
    }
    return 0;
}

static void params(void)
{
    printf("parameters (environment; those marked \"same on every rank\" "
           "shape schedules or messages, and rcoll_comm_init* fails naming "
           "the variable when ranks differ):\n");
    for (int i = 0; i < rcoll_config_nparams(); i++) {
        const rcoll_param_info_t *p = rcoll_config_param(i);
        char val[256];
        rcoll_config_value_string(i, val, sizeof(val));
        printf("  %s=%s\n      [%s, default \"%s\"%s] %s\n", p->name, val,
               p->type, p->deflt,
               rcoll_config_is_shared(i) ? ", same on every rank" : "",
               p->doc);
    }
}

/* 1 if process pid catches signal sig (its SigCgt mask): only then may it
 * be sent, since the default action of SIGUSR1/2 ends a process. */
static int catches(int pid, int sig)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    unsigned long long mask = 0;
    int found = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "SigCgt: %llx", &mask) == 1) {
            found = 1;
            break;
        }
    if (f)
        fclose(f);
    return found && (mask >> (sig - 1) & 1);
}

/* -p PID: creates the reply file, signals the process, prints what its
 * dump thread writes there (core/dump.c). */
static int live_one(int pid)
{
    int sig = rcoll_dump_signal_number(rcoll_config.dump_signal);
    if (sig <= 0) {
        fprintf(stderr, "rcoll-info: -p needs RCOLL_DUMP_SIGNAL (USR1 or "
                "USR2, as the process has it); here it is \"%s\"\n",
                rcoll_config.dump_signal);
        return 2;
    }
    if (kill(pid, 0) != 0) {
        fprintf(stderr, "rcoll-info: pid %d: %s\n", pid, strerror(errno));
        return 1;
    }
    if (!catches(pid, sig)) {
        fprintf(stderr, "rcoll-info: pid %d does not catch SIG%s: not a "
                "process with an rcoll communicator, or its "
                "RCOLL_DUMP_SIGNAL differs; nothing sent\n", pid,
                sig == SIGUSR1 ? "USR1" : "USR2");
        return 1;
    }
    char path[64];
    snprintf(path, sizeof(path), RCOLL_DUMP_REPLY_FMT, pid);
    int fd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
    struct stat st;
    if (fd < 0 && errno == EEXIST && lstat(path, &st) == 0 &&
        S_ISREG(st.st_mode) && st.st_uid == geteuid()) {
        unlink(path); /* a reply an earlier run left behind */
        fd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0600);
    }
    if (fd < 0) {
        fprintf(stderr, "rcoll-info: cannot create %s: %s\n", path,
                strerror(errno));
        return 1;
    }
    int rc = 1;
    if (kill(pid, sig) != 0) {
        fprintf(stderr, "rcoll-info: kill(%d): %s\n", pid, strerror(errno));
        goto out;
    }
    /* the answer is complete when its last line is RCOLL_DUMP_END */
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    const char *end = RCOLL_DUMP_END "\n";
    for (int i = 0; buf && i < 1000; i++) {
        ssize_t n;
        while ((n = read(fd, buf + len, cap - len)) > 0) {
            len += (size_t)n;
            if (len == cap) {
                char *nb = realloc(buf, 2 * cap + 1);
                if (!nb)
                    break;
                buf = nb;
                cap *= 2;
            }
        }
        if (len >= strlen(end) && !memcmp(buf + len - strlen(end), end,
                                          strlen(end))) {
            fwrite(buf, 1, len - strlen(end), stdout);
            rc = 0;
            break;
        }
        usleep(10000);
    }
    if (rc)
        fprintf(stderr, "rcoll-info: no answer from pid %d in 10 s (it is "
                "stopped, or it is a launcher: ask one of its ranks)\n",
                pid);
    free(buf);
out:
    close(fd);
    unlink(path);
    return rc;
}

/* -p PID: that rank; if PID is rcoll-run, each of its ranks. */
static int live(int pid)
{
    char path[96], name[64] = "";
    snprintf(path, sizeof(path), "/proc/%d/comm", pid);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(name, sizeof(name), f))
            name[0] = '\0';
        fclose(f);
    }
    if (strcmp(name, "rcoll-run\n") != 0)
        return live_one(pid);
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", pid, pid);
    f = fopen(path, "r");
    int rc = 0, child, n = 0;
    while (f && fscanf(f, "%d", &child) == 1) {
        n++;
        if (live_one(child) != 0)
            rc = 1;
    }
    if (f)
        fclose(f);
    if (!n) {
        fprintf(stderr, "rcoll-info: rcoll-run (pid %d) has no ranks "
                "running\n", pid);
        return 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    int v = 0, t = 0, a = 0, c = 0, m = 0, mn = 8, pid = 0, md = 0;
    if (rcoll_config_init() != RCOLL_OK)
        fprintf(stderr, "rcoll-info: warning: %s\n", rcoll_last_error());
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v")) v = 1;
        else if (!strcmp(argv[i], "-t")) t = 1;
        else if (!strcmp(argv[i], "-a")) a = 1;
        else if (!strcmp(argv[i], "-c")) c = 1;
        else if (!strcmp(argv[i], "--markdown")) md = 1;
        else if (!strcmp(argv[i], "-m")) {
            m = 1;
            if (i + 1 < argc && atoi(argv[i + 1]) > 0)
                mn = atoi(argv[++i]);
        }
        else if (!strcmp(argv[i], "-p") && i + 1 < argc &&
                 atoi(argv[i + 1]) > 0)
            pid = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (pid)
        return live(pid);
    if (md)
        return params_markdown();
    if (!v && !t && !a && !c && !m)
        v = t = a = c = m = 1;
    if (v) version();
    if (t) transports();
    if (a) algorithms();
    if (m) footprint(mn);
    if (c) params();
    return 0;
}
