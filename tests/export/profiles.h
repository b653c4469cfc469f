/*
 * The profiles the export tests share: one with what real ones have and
 * what breaks careless writers (see test_export.c), and an empty one; and
 * writing a profile into memory.
 */
#ifndef PYPROFD_TESTS_PROFILES_H
#define PYPROFD_TESTS_PROFILES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "export.h"
#include "profile.pb-c.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Chromium starts in a second or two; a minute only catches a hang. */
#define CHROMIUM_TIMEOUT_S 60.0
#define PROTOC_TIMEOUT_S 30.0
/* jsonschema checks the largest document here in about a second; a minute only catches a hang. */
#define SCHEMA_TIMEOUT_S 60.0

#define EVIL_SCRIPT "</script><b id=\"pwned\">x</b>"
#define EVIL_COMMENT "<!--<script>"

#define PROFILE_NFRAMES 12
#define PROFILE_NSTACKS 9
#define NFORMATS 5
#define TOTAL 19 /* the profile's sample count */
#define RATE 100

extern const struct export_frame frames[PROFILE_NFRAMES];
extern const uint32_t st0[3]; /* main;serve;handle */
extern const struct export_stack stacks[PROFILE_NSTACKS];
extern const struct export_profile profile, empty;
extern const enum export_format all_formats[NFORMATS]; /* every format but the table */

/*
 * A profile of two processes' threads, as a query split by threads answers:
 * qualified names, names pprof would simplify away (<module>, <lambda>, <GC>),
 * two functions of one short name in one file told apart by their first
 * lines (a method and a function, as 3.8-3.10 name them), idle samples and
 * attach labels.  THREADED_TOTAL samples: MainThread 7 (2 idle), "worker-1" 5
 * (all idle), an unnamed thread 3.
 */
#define THREADED_TOTAL 15
extern const struct export_profile threaded;

/* What a writer wrote, in memory. */
struct out {
	char *buf;
	size_t len;
};

/* export_write into memory; returns its result with errno kept. */
int export_mem(const struct export_profile *p, enum export_format f, struct out *o);
/* export_write that must succeed. */
void export_ok(const struct export_profile *p, enum export_format f, struct out *o);
void scratch_write(const char *path, const void *data, size_t len);
/* A JSON writer's output, parsed. */
json_t *parse_json(const struct out *o);
/* What we promise of a speedscope file beyond its schema (see profiles.c); its frames. */
json_t *check_speedscope(json_t *doc, double *weight_sum);
/*
 * The DOM of a page after its scripts ran, as headless Chromium dumps it
 * (window 1400x900): script (NULL: none) is put in a <script> before
 * </body>, so it runs after the page's own; the page's URL ends in hash
 * (NULL: none).  Fails the test when Chromium does.
 */
char *page_dom(const struct out *page, const char *script, const char *hash);
/*
 * Headless Chromium's screenshot of the page at hash, width x height, as
 * NAME.png in a scratch directory, and also in $PYPROFD_SCREENSHOTS when
 * that names a directory: a person looks at them there.  Fails the test
 * when Chromium does or the PNG is empty.
 */
void page_screenshot(const struct out *page, const char *hash, const char *name, int width, int height);

/* The gunzipped bytes of a gzip stream (pprof). */
uint8_t *gunzip(const struct out *o, size_t *len);
/* The profile as pprof, decoded by protobuf-c (free with perftools__profiles__profile__free_unpacked). */
Perftools__Profiles__Profile *pprof_of(const struct export_profile *prof);
/* String i of a decoded pprof profile, failing the test when out of its table. */
const char *pprof_str(const Perftools__Profiles__Profile *p, int64_t i);

#endif
