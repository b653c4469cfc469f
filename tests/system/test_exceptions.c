/*
 * Exception mode against threads that spin inside and outside exception
 * handlers (tests/targets/exceptions.py), on every supported interpreter:
 * only the threads whose sys.exc_info() is set are sampled.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"
#include "pythons.h"

TestSuite(exceptions, .init = helpers_init, .fini = helpers_fini);

Test(exceptions, only_threads_handling_one, .timeout = 300)
{
	struct python pys[PYTHONS_MAX];
	size_t n = pythons_supported(pys, PYTHONS_MAX);
	char script[PATH_MAX];
	target_script("exceptions.py", script, sizeof script);
	static const char *const handling[] = {"spin_in_except (", "spin_in_finally ("};
	static const char *const not_handling[] = {"spin_outside (", "spin_after_handled (",
	                                           "spin_in_plain_finally ("};
	for (size_t i = 0; i < n; i++) {
		char ctx[PATH_MAX + 64], pid[16];
		python_describe(&pys[i], ctx, sizeof ctx);
		struct test_target t;
		const char *args[] = {"-I", script, "{report}", NULL};
		test_target_start_python(&t, &pys[i], args);
		json_t *report = test_target_wait_report(&t, 30);
		json_t *seen = json_object_get(report, "handling");
		/* The program's own view first: what the mode must agree with. */
		cr_assert(json_is_true(json_object_get(seen, "spin_in_except")) &&
		              json_is_true(json_object_get(seen, "spin_in_finally")) &&
		              json_is_false(json_object_get(seen, "spin_outside")) &&
		              json_is_false(json_object_get(seen, "spin_after_handled")) &&
		              json_is_false(json_object_get(seen, "spin_in_plain_finally")),
		          "%s: the program's own view is not as the target says", ctx);
		snprintf(pid, sizeof pid, "%d", (int)t.pid);
		const char *argv[] = {pyprofd_bin(), "record", pid, "--mode", "exception", "--duration",
		                      "0.5", "--rate", "200", NULL};
		struct run_result r;
		run_command(&r, argv, NULL);
		char why[1024];
		cr_assert(r.exited && r.code == 0, "%s: record: %s", ctx, run_describe(&r, why, sizeof why));
		for (size_t k = 0; k < sizeof handling / sizeof *handling; k++)
			cr_expect(strstr(r.out, handling[k]), "%s: no sample of %s in exception mode:\n%s", ctx,
			          handling[k], r.out);
		for (size_t k = 0; k < sizeof not_handling / sizeof *not_handling; k++)
			cr_expect(!strstr(r.out, not_handling[k]), "%s: %s was sampled in exception mode:\n%s",
			          ctx, not_handling[k], r.out);
		/* A generator's handler counts while the generator runs, inside its except. */
		const char *gen = strstr(r.out, "spin_in_generator_except (");
		cr_expect(!gen || strstr(gen, ";generator_handler ("),
		          "%s: the generator's thread was sampled outside its handler:\n%s", ctx, r.out);
		/* Wall mode samples them all: the filter is the mode's. */
		argv[4] = "wall";
		run_result_free(&r);
		run_command(&r, argv, NULL);
		cr_assert(r.exited && r.code == 0);
		cr_expect(strstr(r.out, "spin_outside ("), "%s: wall mode lost a thread", ctx);
		run_result_free(&r);
		json_decref(report);
		test_target_kill(&t);
	}
}
