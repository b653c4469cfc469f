/*
 * C frames in the exports: pprof gives each module a Mapping (its file and
 * build id) and each C frame a Location at its address in that module's
 * file; the JSON views give the address and build id; no view shows the
 * address as a line.  go tool pprof reads the mappings back.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "profile.pb-c.h"
#include "profiles.h"

TestSuite(native_export, .init = helpers_init, .fini = helpers_fini);

#define LIBZ "/usr/lib/x86_64-linux-gnu/libz.so.1.2.13"
#define LIBZ_ID "c0ffee00112233445566778899aabbccddeeff01"
#define PYTHON "/usr/bin/python3.15"
#define PYTHON_ID "0123456789abcdef0123456789abcdef01234567"

static const struct export_frame native_frames[] = {
	/* 0 */ {"run_zlib", "app.py", 37, UW_FRAME_PYTHON, 35, NULL},
	/* 1 */ {"zlib_compress", PYTHON, 0x500c05, UW_FRAME_C, 0, PYTHON_ID},
	/* 2 */ {"deflate", LIBZ, 0x6100, UW_FRAME_C, 0, LIBZ_ID},
	/* 3 */ {"[+0x659b]", LIBZ, 0x659b, UW_FRAME_C, 0, LIBZ_ID},
	/* 4 */ {"[+0x91c8b]", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0x91c8b, UW_FRAME_C, 0, NULL},
};
static const uint32_t zst0[] = {0, 1, 2, 3}, zst1[] = {0, 1, 2}, zst2[] = {0, 4};
static const struct export_stack native_stacks[] = {
	{zst0, 4, 5, 1, 0, 0, 0, false},
	{zst1, 3, 2, 1, 0, 0, 0, false},
	{zst2, 2, 1, 1, 0, 0, 0, false},
};
static const struct export_profile native_profile = {
	.frames = native_frames,
	.nframes = sizeof native_frames / sizeof native_frames[0],
	.stacks = native_stacks,
	.nstacks = sizeof native_stacks / sizeof native_stacks[0],
	.name = "native",
	.mode = "cpu",
	.rate_hz = 100,
	.from_unix = 1700000000.0,
	.until_unix = 1700000010.0,
};

static const Perftools__Profiles__Function *function_of(const Perftools__Profiles__Profile *p, uint64_t id)
{
	for (size_t i = 0; i < p->n_function; i++)
		if (p->function[i]->id == id)
			return p->function[i];
	cr_assert_fail("no function %llu", (unsigned long long)id);
	return NULL;
}

Test(native_export, pprof_has_a_mapping_a_module_and_c_frames_at_their_addresses)
{
	Perftools__Profiles__Profile *p = pprof_of(&native_profile);

	/* Three modules: libz and the interpreter with build ids, libc without. */
	cr_assert_eq(p->n_mapping, 3, "%zu mappings, not one a module", p->n_mapping);
	unsigned with_id = 0;
	for (size_t m = 0; m < p->n_mapping; m++) {
		const Perftools__Profiles__Mapping *map = p->mapping[m];
		const char *file = pprof_str(p, map->filename), *id = pprof_str(p, map->build_id);
		cr_assert(map->id > 0 && map->has_functions, "mapping %zu", m);
		if (strcmp(file, LIBZ) == 0) {
			cr_assert_str_eq(id, LIBZ_ID);
			cr_assert_gt(map->memory_limit, 0x659b, "libz's mapping ends before its frames");
			with_id++;
		} else if (strcmp(file, PYTHON) == 0) {
			cr_assert_str_eq(id, PYTHON_ID);
			with_id++;
		} else {
			cr_assert_str_eq(id, "", "%s has no build id", file);
		}
	}
	cr_assert_eq(with_id, 2);
	/* Each C frame at its address, in its module's mapping; a Python frame in none, at its line. */
	unsigned c_frames = 0;
	for (size_t l = 0; l < p->n_location; l++) {
		const Perftools__Profiles__Location *loc = p->location[l];
		cr_assert_eq(loc->n_line, 1);
		const Perftools__Profiles__Function *fn = function_of(p, loc->line[0]->function_id);
		const char *name = pprof_str(p, fn->name);
		if (strcmp(name, "run_zlib") == 0) {
			cr_assert_eq(loc->mapping_id, 0, "a Python frame in a mapping");
			cr_assert_eq(loc->line[0]->line, 37);
			continue;
		}
		c_frames++;
		cr_assert_eq(loc->line[0]->line, 0, "%s: a C frame's address shown as its line", name);
		const Perftools__Profiles__Mapping *map = NULL;
		for (size_t m = 0; m < p->n_mapping; m++)
			if (p->mapping[m]->id == loc->mapping_id)
				map = p->mapping[m];
		cr_assert_not_null(map, "%s: in no mapping", name);
		for (size_t f = 0; f < native_profile.nframes; f++)
			if (strcmp(native_frames[f].function, name) == 0) {
				cr_assert_eq(loc->address, (uint64_t)native_frames[f].line, "%s: address", name);
				cr_assert_str_eq(pprof_str(p, map->filename), native_frames[f].file, "%s: mapping", name);
			}
	}
	cr_assert_eq(c_frames, 4);
	perftools__profiles__profile__free_unpacked(p, NULL);
}

Test(native_export, json_gives_address_and_build_id_never_a_line)
{
	struct out o;
	export_ok(&native_profile, EXPORT_JSON, &o);
	json_t *doc = json_loadb(o.buf, o.len, 0, NULL);
	cr_assert_not_null(doc, "not JSON");
	free(o.buf);
	json_t *jframes = json_object_get(doc, "frames");
	cr_assert_eq(json_array_size(jframes), native_profile.nframes);
	for (size_t i = 0; i < native_profile.nframes; i++) {
		json_t *f = json_array_get(jframes, i);
		const struct export_frame *want = &native_frames[i];
		if (want->kind != UW_FRAME_C) {
			cr_assert_eq(json_integer_value(json_object_get(f, "line")), want->line);
			cr_assert_null(json_object_get(f, "address"));
			continue;
		}
		cr_assert(json_is_null(json_object_get(f, "line")), "%s: a line", want->function);
		cr_assert_eq(json_integer_value(json_object_get(f, "address")), want->line, "%s: address",
		             want->function);
		const char *id = json_string_value(json_object_get(f, "build_id"));
		if (want->build_id)
			cr_assert(id && strcmp(id, want->build_id) == 0, "%s: build id %s", want->function, id ? id : "none");
		else
			cr_assert_null(id, "%s: a build id it has not", want->function);
	}
	json_decref(doc);
}

/* The collapsed text: C frames by symbol and module, no address as a line. */
Test(native_export, collapsed_shows_no_address_as_a_line)
{
	struct out o;
	export_ok(&native_profile, EXPORT_COLLAPSED, &o);
	char *text = strndup(o.buf, o.len);
	free(o.buf);
	cr_assert(strstr(text, "deflate (" LIBZ ")"), "no deflate (libz): %s", text);
	cr_assert_null(strstr(text, LIBZ ":"), "an address shown as a line: %s", text);
	cr_assert(strstr(text, "run_zlib (app.py:37)"), "the Python frame's line: %s", text);
	free(text);
}

/* go tool pprof reads the mappings: -raw lists each with its file and build id. */
Test(native_export, go_tool_pprof_reads_the_mappings, .timeout = 300)
{
	cr_assert(access("/usr/bin/go", X_OK) == 0,
	          "go is not installed: make deps installs golang-go for `go tool pprof`");
	struct out o;
	export_ok(&native_profile, EXPORT_PPROF, &o);
	char dir[PATH_MAX], path[PATH_MAX + 32], home[PATH_MAX + 16], cache[PATH_MAX + 32];
	scratch_dir(dir, sizeof dir);
	snprintf(path, sizeof path, "%s/native.pb.gz", dir);
	scratch_write(path, o.buf, o.len);
	free(o.buf);
	snprintf(home, sizeof home, "HOME=%s", dir);
	snprintf(cache, sizeof cache, "GOCACHE=%s/cache", dir);
	const char *argv[] = {"/usr/bin/env", home, cache, "PPROF_TMPDIR=/tmp", "/usr/bin/go", "tool", "pprof",
	                      "-raw", path, NULL};
	struct run_result r;
	run_command(&r, argv, &(struct run_opts){.timeout_s = 120});
	char why[2048];
	cr_assert(r.exited && r.code == 0, "go tool pprof -raw: %s", run_describe(&r, why, sizeof why));
	const char *maps = strstr(r.out, "Mappings");
	cr_assert_not_null(maps, "no mappings in -raw:\n%s", r.out);
	cr_assert(strstr(maps, LIBZ " " LIBZ_ID), "libz's mapping without its build id:\n%s", maps);
	cr_assert(strstr(maps, PYTHON " " PYTHON_ID), "the interpreter's mapping without its build id:\n%s", maps);
	run_result_free(&r);
}
