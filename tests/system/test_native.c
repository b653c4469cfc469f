/*
 * Native frames (dump --native): threads that wait in C (time.sleep, a
 * lock's acquire, a socket's recv; tests/targets/waiters.py) show, between
 * and below their Python frames, exactly the C frames gdb shows of the same
 * thread, gdb attached after the dump as the oracle (a waiting thread's
 * stack does not move).  3.15 from the Debian root keeps frame pointers,
 * pyenv's 3.12 does not (CFI alone), and 3.9 calls the eval loop once a
 * Python frame.  The target is never stopped by pyprofd: gdb is the only
 * tracer here, and comes after.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "helpers.h"
#include "pythons.h"

TestSuite(native, .init = helpers_init, .fini = helpers_fini);

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define NATIVE_EVAL "_PyEval_EvalFrameDefault"
/* Where the dump shows Python frames, gdb shows the eval loop that runs them. */
#define NATIVE_EVAL_RUN "<eval loop>"

static const unsigned native_minors[] = {8, 9, 10, 11, 12, 13, 14, 15};

ParameterizedTestParameters(native, waiting_threads_show_the_c_frames_gdb_shows)
{
	size_t n = COUNT(native_minors);
	return cr_make_param_array(struct python_param, python_params_of_minors(native_minors, n), n,
	                           python_params_free);
}

/* gdb's frames of every thread of pid, as tests/native/gdb_frames.py prints them (the caller's). */
static json_t *native_gdb_frames(const struct python *py, pid_t pid)
{
	char script[PATH_MAX], root[PATH_MAX], sysroot[PATH_MAX + 16], pidtext[16], exe[32], why[1024];
	target_script("../native/gdb_frames.py", script, sizeof script);
	snprintf(pidtext, sizeof pidtext, "%d", (int)pid);
	/* The program as the kernel holds it: its path may be the root's, not ours. */
	snprintf(exe, sizeof exe, "/proc/%d/exe", (int)pid);
	python_root(py, root, sizeof root);
	/* The root's processes name their libraries as the root sees them. */
	snprintf(sysroot, sizeof sysroot, "set sysroot %s", *root ? root : "target:");
	/* Separate debug files would give gdb names the modules do not hold: none are looked for, by either. */
	const char *const argv[] = {"gdb", "-q", "-batch", "-nx", "-iex", "set auto-load off", "-iex",
	                            "set debug-file-directory /nonexistent", "-iex", sysroot, exe, "-p", pidtext,
	                            "-x", script, NULL};
	struct run_result r;
	run_command(&r, argv, &(struct run_opts){.timeout_s = 60});
	const char *line = r.out ? strstr(r.out, "GDB-FRAMES ") : NULL;
	cr_assert(line, "gdb printed no frames: %s\n%s", run_describe(&r, why, sizeof why), r.out ? r.out : "");
	json_error_t jerr;
	json_t *frames = json_loads(line + strlen("GDB-FRAMES "), JSON_DISABLE_EOF_CHECK, &jerr);
	cr_assert(frames, "gdb's frames are not JSON: %s", jerr.text);
	run_result_free(&r);
	return frames;
}

/* A module's file name without its folder. */
static const char *native_base(const char *path)
{
	const char *slash = path ? strrchr(path, '/') : NULL;
	return slash ? slash + 1 : path ? path : "";
}

/*
 * What gdb would show for the dump's frames of a thread: a C frame by its
 * symbol (null where the module holds none), the Python frames one eval
 * loop's run by that loop (before 3.11, one Python frame a loop).  Into a
 * new array; *first_python the first Python frame's function.
 */
static json_t *native_as_gdb(json_t *frames, unsigned minor, const char **first_python, json_t **modules)
{
	json_t *seq = json_array();
	*modules = json_array();
	*first_python = NULL;
	bool in_python = false;
	size_t i;
	json_t *f;
	json_array_foreach(frames, i, f) {
		const char *kind = jstr(f, "kind"), *name = jstr(f, "function");
		if (strcmp(kind, "c") == 0) {
			in_python = false;
			bool unnamed = strncmp(name, "[+0x", 4) == 0;
			json_array_append_new(seq, unnamed ? json_null() : json_string(name));
			json_array_append_new(*modules, json_string(native_base(jstr(f, "file"))));
			continue;
		}
		cr_assert_str_eq(kind, "python", "a frame of kind %s (%s) among a waiting thread's", kind, name);
		if (!*first_python)
			*first_python = name;
		if (!in_python || minor < 11) {
			json_array_append_new(seq, json_string(NATIVE_EVAL_RUN));
			json_array_append_new(*modules, json_null());
		}
		in_python = true;
	}
	return seq;
}

/* tests/targets/waiters.py on p's interpreter, once its threads wait: its report (the caller's). */
static json_t *native_waiters_start(struct python_param *p, struct test_target *t)
{
	if (p->none)
		cr_skip_test("no Python 3.%u here", p->minor);
	if (p->py.root_len && geteuid() != 0)
		cr_skip_test("the Debian root's interpreters need root to chroot");
	return test_target_start_script(t, &p->py, "waiters.py");
}

/* The dump's thread whose kernel id is tid, NULL when it has none. */
static json_t *native_thread_of(json_t *dump, json_int_t tid)
{
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(dump, "threads"), i, e) if (jint(e, "native_thread_id") == tid) return e;
	return NULL;
}

ParameterizedTest(struct python_param *p, native, waiting_threads_show_the_c_frames_gdb_shows, .timeout = 180)
{
	struct test_target t;
	json_t *report = native_waiters_start(p, &t);
	json_t *tids = json_object_get(report, "threads");
	char ctx[PATH_MAX + 64];
	python_describe(&p->py, ctx, sizeof ctx);

	static const char *const flags[] = {"--native", "--json", NULL};
	struct run_result r;
	run_dump(&r, t.pid, flags, NULL);
	cr_assert(r.exited && r.code == 0, "%s: dump --native failed: %s", ctx, r.err);
	cr_assert(!strstr(r.err, "no C frames"), "%s: the kernel's copy was refused: %s", ctx, r.err);
	json_t *dump = json_loads(r.out, 0, NULL);
	cr_assert(dump, "%s: dump --native printed no JSON", ctx);
	run_result_free(&r);
	json_t *oracle = native_gdb_frames(&p->py, t.pid);

	static const struct {
		const char *role, *function;
	} roles[] = {{"sleep", "in_sleep"}, {"lock", "in_lock"}, {"recv", "in_recv"}};
	for (size_t k = 0; k < COUNT(roles); k++) {
		json_int_t tid = json_integer_value(json_object_get(tids, roles[k].role));
		json_t *th = native_thread_of(dump, tid);
		cr_assert(th, "%s: the dump has no thread %lld (%s)", ctx, (long long)tid, roles[k].role);
		const char *first_python;
		json_t *modules, *ours = native_as_gdb(json_object_get(th, "frames"), p->minor, &first_python, &modules);
		char tidtext[24];
		snprintf(tidtext, sizeof tidtext, "%lld", (long long)tid);
		json_t *theirs = json_object_get(oracle, tidtext);
		cr_assert(theirs, "%s: gdb saw no thread %s", ctx, tidtext);
		char *a = json_dumps(ours, JSON_COMPACT), *b = json_dumps(theirs, JSON_COMPACT);
		cr_assert(first_python && strcmp(first_python, roles[k].function) == 0,
		          "%s: %s's innermost Python frame is %s, not %s: %s", ctx, roles[k].role,
		          first_python ? first_python : "none", roles[k].function, a);
		/* Waiting in C: C frames above the Python ones (libc's own may have no symbol). */
		json_t *top = json_array_get(ours, 0);
		cr_assert(top && (json_is_null(top) || strcmp(json_string_value(top), NATIVE_EVAL_RUN) != 0),
		          "%s: %s shows no C frame above its Python frames: %s", ctx, roles[k].role, a);
		cr_assert_eq(json_array_size(ours), json_array_size(theirs), "%s: %s: pyprofd %s\ngdb %s", ctx,
		             roles[k].role, a, b);
		for (size_t f = 0; f < json_array_size(ours); f++) {
			json_t *want = json_object_get(json_array_get(theirs, f), "name");
			const char *mine_name = json_string_value(json_array_get(ours, f));
			/* A stripped build's eval loop is a clone without a name. */
			bool eval_matches = mine_name && strcmp(mine_name, NATIVE_EVAL_RUN) == 0 &&
			                    (json_is_null(want) ||
			                     strncmp(json_string_value(want), NATIVE_EVAL, strlen(NATIVE_EVAL)) == 0);
			cr_assert(eval_matches || json_equal(json_array_get(ours, f), want),
			          "%s: %s frame %zu: pyprofd %s\ngdb %s", ctx, roles[k].role, f, a, b);
			/* gdb names a shared object's file, not the program's. */
			const char *module = json_string_value(json_object_get(json_array_get(theirs, f), "module"));
			const char *mine = json_string_value(json_array_get(modules, f));
			if (module && mine)
				cr_assert_str_eq(mine, native_base(module), "%s: %s frame %zu's module", ctx, roles[k].role, f);
		}
		free(a);
		free(b);
		json_decref(ours);
		json_decref(modules);
	}
	json_decref(oracle);
	json_decref(dump);
	json_decref(report);
	test_target_kill(&t);
}

/*
 * Without the rights to load the kernel's copier (a user other than root),
 * --native says why once, on stderr, and the dump is the one without it:
 * <native> marks where C entered the eval loop, and no C frame, never a
 * guessed one.
 */
Test(native, without_the_kernel_copy_marks_and_says_why, .timeout = 120)
{
	cr_assert_eq(geteuid(), 0, "this test runs as root (it acts as another user)");
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	const struct python *py = NULL;
	/* A 3.11+ interpreter nobody may run: those mark where C sits. */
	for (size_t i = 0; i < n && !py; i++) {
		const struct python *one = python_for_nobody(pys + i, 1);
		if (one && one->minor >= 11)
			py = one;
	}
	if (!py)
		cr_skip_test("no 3.11+ interpreter the user nobody may run");
	if (yama_restricts_ptrace())
		cr_skip_test("Yama lets only root read another process here");
	char script[PATH_MAX], copy[PATH_MAX];
	target_script("waiters.py", script, sizeof script);
	/* nobody writes its report where it may. */
	char dir[PATH_MAX], report[PATH_MAX + 16];
	scratch_dir(dir, sizeof dir);
	cr_assert(chown(dir, NOBODY_UID, NOBODY_GID) == 0);
	snprintf(report, sizeof report, "%s/report.json", dir);
	const char *argv[] = {AS_NOBODY, py->path, "-I", bin_for_others(script, copy, sizeof copy), report, NULL};
	struct test_target t;
	test_target_start_argv(&t, argv);
	for (int tries = 0; access(report, F_OK) != 0; tries++) {
		cr_assert(tries < TARGET_READY_TIMEOUT_S * 10 && !test_target_exited(&t), "nobody's target wrote no report");
		usleep(100 * 1000);
	}

	static const char *const flags[] = {"--native", "--json", NULL};
	struct run_result r;
	char bin[PATH_MAX];
	struct run_opts nobody = {.drop_privileges = true, .uid = NOBODY_UID, .gid = NOBODY_GID,
	                          .bin = bin_for_others(pyprofd_bin(), bin, sizeof bin)};
	run_dump(&r, t.pid, flags, &nobody);
	char why[1024];
	cr_assert(r.exited && r.code == 0, "dump --native as nobody failed: %s", run_describe(&r, why, sizeof why));
	const char *said = strstr(r.err, "--native: no C frames");
	cr_assert(said && !strstr(said + 1, "--native"), "not said once why there are no C frames: %s", r.err);
	json_t *dump = json_loads(r.out, 0, NULL);
	cr_assert(dump, "no JSON: %s", r.out);
	size_t i, k, markers = 0;
	json_t *th, *f;
	json_array_foreach(json_object_get(dump, "threads"), i, th) json_array_foreach(json_object_get(th, "frames"), k, f)
	{
		cr_assert_str_neq(jstr(f, "kind"), "c", "a C frame without the kernel's copy: %s", jstr(f, "function"));
		markers += strcmp(jstr(f, "kind"), "native") == 0;
	}
	cr_assert_gt(markers, 0, "no <native> marks in the dump: %s", r.out);
	json_decref(dump);
	run_result_free(&r);
	test_target_kill(&t);
}

/* A dump's thread as a collapsed line without its count: outermost first, `name (file[:line])`. */
static void native_collapsed(json_t *frames, char *out, size_t len)
{
	out[0] = '\0';
	for (size_t i = json_array_size(frames); i-- > 0;) {
		json_t *f = json_array_get(frames, i);
		const char *q = jstr(f, "qualname"), *name = q && *q ? q : jstr(f, "function");
		char one[1024];
		if (strcmp(jstr(f, "kind"), "python") == 0)
			snprintf(one, sizeof one, "%s (%s:%lld)%s", name, jstr(f, "file"), (long long)jint(f, "line"),
			         i ? ";" : "");
		else
			snprintf(one, sizeof one, "%s (%s)%s", name, jstr(f, "file"), i ? ";" : "");
		strncat(out, one, len - strlen(out) - 1);
	}
}

/* Whether collapsed text holds the line `stack COUNT`. */
static bool native_has_line(const char *collapsed, const char *stack)
{
	size_t n = strlen(stack);
	for (const char *at = collapsed; (at = strstr(at, stack)); at += n)
		if ((at == collapsed || at[-1] == '\n') && at[n] == ' ')
			return true;
	return false;
}

static const unsigned sampled_minors[] = {12, 15};

ParameterizedTestParameters(native, record_and_the_history_hold_the_dumps_c_frames)
{
	size_t n = COUNT(sampled_minors);
	return cr_make_param_array(struct python_param, python_params_of_minors(sampled_minors, n), n,
	                           python_params_free);
}

/*
 * The samples of `record --native` and of the daemon's `attach --native`
 * hold, for each waiting thread, the stack `dump --native` shows (whose C
 * frames are gdb's, above): the C frames reach the history whole.
 */
ParameterizedTest(struct python_param *p, native, record_and_the_history_hold_the_dumps_c_frames, .timeout = 180)
{
	struct test_target t;
	json_t *report = native_waiters_start(p, &t);
	char ctx[PATH_MAX + 64], pid[16];
	python_describe(&p->py, ctx, sizeof ctx);
	snprintf(pid, sizeof pid, "%d", (int)t.pid);
	static const char *const flags[] = {"--native", "--json", NULL};
	json_t *dump = dump_json(t.pid, flags, ctx);

	const char *rec[] = {pyprofd_bin(), "record", pid, "--native", "--duration", "1", "--format", "collapsed", NULL};
	struct run_result recorded;
	run_command(&recorded, rec, NULL);
	cr_assert(recorded.exited && recorded.code == 0, "%s: record --native failed: %s", ctx, recorded.err);

	struct daemon d;
	daemon_start(&d, NULL);
	const char *attach[] = {"attach", pid, "--native", NULL};
	struct run_result r;
	ctl_run(&d, &r, attach, NULL);
	cr_assert(r.exited && r.code == 0, "%s: attach --native failed: %s", ctx, r.err);
	run_result_free(&r);

	static const char *const roles[] = {"sleep", "lock", "recv"};
	json_t *tids = json_object_get(report, "threads");
	for (size_t k = 0; k < COUNT(roles); k++) {
		json_int_t tid = json_integer_value(json_object_get(tids, roles[k]));
		json_t *th = native_thread_of(dump, tid);
		cr_assert(th, "%s: the dump has no thread %s", ctx, roles[k]);
		char want[16384];
		native_collapsed(json_object_get(th, "frames"), want, sizeof want);
		cr_assert(strstr(want, " (") && strchr(want, ';'), "%s: an empty stack for %s", ctx, roles[k]);
		cr_assert(native_has_line(recorded.out, want), "%s: record --native has no sample of %s's stack %s:\n%s",
		          ctx, roles[k], want, recorded.out);
		/* The history is written every few seconds: asked until it holds the stack. */
		bool held = false;
		const char *query[] = {"query", "--pid", pid, NULL};
		for (int tries = 0; !held && tries < 300; tries++) {
			ctl_run(&d, &r, query, NULL);
			held = r.exited && r.code == 0 && native_has_line(r.out, want);
			if (!held && tries == 299)
				cr_assert_fail("%s: the history has no sample of %s's stack %s:\n%s", ctx, roles[k], want, r.out);
			run_result_free(&r);
			if (!held)
				usleep(100 * 1000);
		}
	}
	daemon_stop(&d);
	run_result_free(&recorded);
	json_decref(dump);
	json_decref(report);
	test_target_kill(&t);
}
