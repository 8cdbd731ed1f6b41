/* engine_bench: runs every runtime's benchmark executable (bench_varq,
 * bench_starpu, bench_omp_gcc, bench_omp_clang, bench_taskflow, found beside
 * this program) one after another with the same options, collects their
 * result lines, and prints the comparison: ns per task for each workload and
 * worker count, METG(50%) of the stencil, and the ratios varq / peer. With
 * --json FILE it also writes everything as JSON.
 *
 * usage: engine_bench [--workers 1,2] [--reps N] [--only abcde] [--tiny]
 *                     [--json FILE] [--load N]
 * --load N runs N busy loops at nice 10 beside every runtime for the whole
 * run (each its own process): how each runtime degrades when its cores are
 * shared with other work, as on a busy machine or in a cloud VM whose
 * neighbours compute. A runtime that spins where it should yield, or that
 * waits for a thread the scheduler preempted, shows it here.
 * A runtime whose executable was not built is reported as missing; one that
 * fails (or computes a wrong result) makes engine_bench exit 1. */
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXROWS 512

static const char *const programs[] = {"bench_varq", "bench_starpu", "bench_omp_gcc",
                                       "bench_omp_clang", "bench_taskflow"};
static const char *const workloads[] = {"independent", "chain", "fanout", "random"};
static const char *const workload_title[] = {
    "(a) independent tasks", "(b) chain on one var", "(c) fan-out / fan-in, 8 readers",
    "(d) random sets over 64 vars"};

struct row {
    char kind[16], rt[32], workload[16], text[160];
    int workers;
    long tasks;
    double median, min; /* ns/task; for metg: METG us and top efficiency */
};

static struct row rows[MAXROWS];
static int nrows;
static char rts[16][32];
static int nrts;

static void add_runtime(const char *name)
{
    for (int i = 0; i < nrts; i++)
        if (strcmp(rts[i], name) == 0)
            return;
    if (nrts < 16)
        snprintf(rts[nrts++], sizeof rts[0], "%s", name);
}

/* Parses one tab-separated line of a runner; ignores what it does not know. */
static void parse(char *line)
{
    if (nrows == MAXROWS)
        return;
    struct row *r = &rows[nrows];
    memset(r, 0, sizeof *r);
    char *f[8];
    int n = 0;
    for (char *tok = strtok(line, "\t\n"); tok && n < 8; tok = strtok(NULL, "\t\n"))
        f[n++] = tok;
    if (n < 3)
        return;
    snprintf(r->kind, sizeof r->kind, "%s", f[0]);
    snprintf(r->rt, sizeof r->rt, "%s", f[1]);
    if (strcmp(f[0], "describe") == 0 && n >= 4) {
        r->workers = atoi(f[2]);
        snprintf(r->text, sizeof r->text, "%s", f[3]);
    } else if (strcmp(f[0], "result") == 0 && n >= 7) {
        snprintf(r->workload, sizeof r->workload, "%s", f[2]);
        r->workers = atoi(f[3]);
        r->tasks = atol(f[4]);
        r->median = atof(f[5]);
        r->min = atof(f[6]);
    } else if (strcmp(f[0], "metg") == 0 && n >= 5) {
        r->workers = atoi(f[2]);
        r->median = atof(f[3]);
        r->min = atof(f[4]);
    } else {
        return;
    }
    add_runtime(r->rt);
    nrows++;
}

static const struct row *find(const char *kind, const char *rt, const char *w, int workers)
{
    for (int i = 0; i < nrows; i++)
        if (strcmp(rows[i].kind, kind) == 0 && strcmp(rows[i].rt, rt) == 0 &&
            rows[i].workers == workers && (!w || strcmp(rows[i].workload, w) == 0))
            return &rows[i];
    return NULL;
}

/* The column heads of a table: one column per runtime. */
static void print_header(void)
{
    printf("%-8s", "workers");
    for (int k = 0; k < nrts; k++)
        printf(" %18s", rts[k]);
    printf("\n");
}

static void print_tables(const int *workers, int nw)
{
    for (int w = 0; w < 4; w++) {
        if (!find("result", "varq", workloads[w], workers[0]))
            continue;
        printf("\n%s: ns per task, median of the repetitions (min)\n", workload_title[w]);
        print_header();
        for (int i = 0; i < nw; i++) {
            printf("%-8d", workers[i]);
            for (int k = 0; k < nrts; k++) {
                const struct row *r = find("result", rts[k], workloads[w], workers[i]);
                char cell[40] = "-";
                if (r)
                    snprintf(cell, sizeof cell, "%.0f (%.0f)", r->median, r->min);
                printf(" %18s", cell);
            }
            printf("\n");
        }
        printf("%-8s", "varq / ");
        for (int k = 0; k < nrts; k++)
            printf(" %18s", strncmp(rts[k], "varq", 4) == 0 ? "" : rts[k]);
        printf("\n");
        for (int i = 0; i < nw; i++) {
            const struct row *v = find("result", "varq", workloads[w], workers[i]);
            printf("%-8d", workers[i]);
            for (int k = 0; k < nrts; k++) {
                const struct row *r = find("result", rts[k], workloads[w], workers[i]);
                char cell[40] = "";
                if (v && r && strncmp(rts[k], "varq", 4) != 0)
                    snprintf(cell, sizeof cell, "%.2fx", v->median / r->median);
                printf(" %18s", cell);
            }
            printf("\n");
        }
    }
    if (!find("metg", "varq", NULL, workers[0]))
        return;
    printf("\n(e) stencil_1d, width = workers: METG(50%%) in us (lower is better)\n");
    print_header();
    for (int i = 0; i < nw; i++) {
        printf("%-8d", workers[i]);
        for (int k = 0; k < nrts; k++) {
            const struct row *r = find("metg", rts[k], NULL, workers[i]);
            char cell[40] = "-";
            if (r && r->median >= 0)
                snprintf(cell, sizeof cell, "%.2f", r->median);
            else if (r)
                snprintf(cell, sizeof cell, "never 50%%");
            printf(" %18s", cell);
        }
        printf("\n");
    }
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    }
    fputc('"', f);
}

static int write_json(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "engine_bench: cannot write %s\n", path);
        return -1;
    }
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    fprintf(f, "{\"date\":\"%s\",\"host\":", date);
    json_string(f, host);
    fprintf(f, ",\"cores\":%ld,\"rows\":[", sysconf(_SC_NPROCESSORS_ONLN));
    for (int i = 0; i < nrows; i++) {
        const struct row *r = &rows[i];
        fprintf(f, "%s\n{\"kind\":\"%s\",\"runtime\":", i ? "," : "", r->kind);
        json_string(f, r->rt);
        fprintf(f, ",\"workers\":%d", r->workers);
        if (strcmp(r->kind, "describe") == 0) {
            fprintf(f, ",\"text\":");
            json_string(f, r->text);
        } else if (strcmp(r->kind, "result") == 0) {
            fprintf(f, ",\"workload\":\"%s\",\"tasks\":%ld,\"median_ns\":%.1f,\"min_ns\":%.1f",
                    r->workload, r->tasks, r->median, r->min);
        } else {
            fprintf(f, ",\"metg_us\":%.3f,\"efficiency_at_largest_grain\":%.3f", r->median,
                    r->min);
        }
        fputc('}', f);
    }
    fprintf(f, "\n]}\n");
    return fclose(f) == 0 ? 0 : -1;
}

/* Starts n busy loops at nice 10 (children of this process); their pids go
 * to pids. Returns how many started. */
static int load_start(int n, pid_t *pids)
{
    int k = 0;
    for (; k < n; k++) {
        pid_t pid = fork();
        if (pid < 0)
            break;
        if (pid == 0) {
            /* dies with engine_bench, even when that is killed */
            if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() == 1)
                _exit(1);
            if (setpriority(PRIO_PROCESS, 0, 10) != 0)
                _exit(1);
            for (volatile unsigned long spin = 0;; spin++)
                ;
        }
        pids[k] = pid;
    }
    return k;
}

static void load_stop(int n, const pid_t *pids)
{
    for (int i = 0; i < n; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
}

int main(int argc, char **argv)
{
    int load = 0;
    pid_t load_pids[64];
    const char *json = NULL;
    char args[512] = "";
    int workers[8] = {1, 2}, nw = 2;
    for (int i = 1; i < argc; i++) {
        bool takes = i + 1 < argc && (strcmp(argv[i], "--workers") == 0 ||
                                      strcmp(argv[i], "--reps") == 0 ||
                                      strcmp(argv[i], "--only") == 0);
        if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json = argv[++i];
        } else if (strcmp(argv[i], "--load") == 0 && i + 1 < argc) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 0 || n > 64) {
                fprintf(stderr, "engine_bench: --load takes 0 to 64 busy loops, not \"%s\"\n",
                        argv[i]);
                return 2;
            }
            load = (int)n;
        } else if (strcmp(argv[i], "--tiny") == 0) {
            strncat(args, " --tiny", sizeof args - strlen(args) - 1);
        } else if (takes) {
            if (strcmp(argv[i], "--workers") == 0) {
                nw = 0;
                for (char *s = argv[i + 1]; *s && nw < 8; s++) {
                    workers[nw++] = (int)strtol(s, &s, 10);
                    if (!*s)
                        break;
                }
            }
            if (strspn(argv[i + 1], "0123456789,abcde") != strlen(argv[i + 1])) {
                fprintf(stderr, "engine_bench: bad value \"%s\" for %s\n", argv[i + 1], argv[i]);
                return 2;
            }
            snprintf(args + strlen(args), sizeof args - strlen(args), " %s %s", argv[i],
                     argv[i + 1]);
            i++;
        } else {
            fprintf(stderr,
                    "usage: %s [--workers 1,2] [--reps N] [--only abcde] [--tiny] [--json FILE] "
                    "[--load N]\n",
                    argv[0]);
            return 2;
        }
    }

    char dir[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (len <= 0) {
        fprintf(stderr, "engine_bench: cannot find my own directory\n");
        return 1;
    }
    dir[len] = '\0';
    *strrchr(dir, '/') = '\0';

    int failed = 0;
    int loaded = load_start(load, load_pids);
    if (loaded < load) {
        fprintf(stderr, "engine_bench: could start only %d of %d busy loops\n", loaded, load);
        load_stop(loaded, load_pids);
        return 1;
    }
    for (size_t p = 0; p < sizeof programs / sizeof *programs; p++) {
        char path[PATH_MAX + 64], cmd[PATH_MAX + 600];
        snprintf(path, sizeof path, "%s/%s", dir, programs[p]);
        if (access(path, X_OK) != 0) {
            printf("%s: not built (its dependency was not found), skipped\n", programs[p]);
            continue;
        }
        snprintf(cmd, sizeof cmd, "'%s'%s", path, args);
        fprintf(stderr, "engine_bench: running %s\n", cmd);
        FILE *in = popen(cmd, "r");
        if (!in) {
            fprintf(stderr, "engine_bench: cannot run %s\n", path);
            failed = 1;
            continue;
        }
        char line[512];
        while (fgets(line, sizeof line, in))
            parse(line);
        int status = pclose(in);
        if (status != 0) {
            fprintf(stderr, "engine_bench: %s failed (status %d)\n", programs[p], status);
            failed = 1;
        }
    }

    load_stop(loaded, load_pids);

    printf("\nruntimes:\n");
    for (int i = 0; i < nrows; i++)
        if (strcmp(rows[i].kind, "describe") == 0 && rows[i].workers == workers[nw - 1])
            printf("  %-12s %s\n", rows[i].rt, rows[i].text);
    if (load)
        printf("  beside %d busy loop(s) at nice 10, one process each, for the whole run\n", load);
    print_tables(workers, nw);
    if (json && write_json(json) < 0)
        failed = 1;
    return failed;
}
