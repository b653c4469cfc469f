/*
 * The layout tables against real interpreters.
 *
 * Each interpreter found is asked, through ctypes, to read its own objects at
 * the offsets our layout gives and to print that next to what Python itself
 * says (id() of the referenced object, len(), the bytes of a str...).  A wrong
 * offset reads the wrong word and the two disagree, or the child crashes on a
 * bad pointer; both fail the test.  For 3.13+ the layout first comes from the
 * interpreter's own _Py_DebugOffsets, read out of its _PyRuntime.
 *
 * Tests are per minor version and skip when no interpreter of that version is
 * installed.  test_layout_tables.c checks the tables offline.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "layout.h"
#include "pythons.h"

#define CHILD_OUT_MAX (256 * 1024)
#define RAW_MAX 1024

/* ---- running a child interpreter ----------------------------------------- */

/*
 * Runs `python -I -c script args...`, collecting stdout into a malloc'd,
 * NUL-terminated buffer.  Returns the buffer; *status is the wait status.
 */
static char *run_python(const struct python *py, const char *script, char **args, size_t nargs,
                        int *status)
{
	const char **argv = calloc(nargs + 4, sizeof *argv);
	cr_assert_not_null(argv);
	argv[0] = "-I";
	argv[1] = "-c";
	argv[2] = script;
	for (size_t i = 0; i < nargs; i++)
		argv[3 + i] = args[i];
	pid_t pid;
	FILE *child = python_popen(py, argv, false, &pid);
	free(argv);
	char *out = malloc(CHILD_OUT_MAX);
	cr_assert_not_null(out);
	size_t len = 0;
	char spill[4096];
	for (;;) {
		/* Past the buffer, keep draining so the child never blocks. */
		bool full = len == CHILD_OUT_MAX - 1;
		size_t n = full ? fread(spill, 1, sizeof spill, child)
		                : fread(out + len, 1, CHILD_OUT_MAX - 1 - len, child);
		if (n == 0)
			break;
		if (!full)
			len += n;
	}
	out[len] = '\0';
	*status = python_pclose(child, pid);
	return out;
}

/* The rest of the line after "<tag> <name> ", or NULL. */
static const char *find_line(const char *out, const char *tag, const char *name)
{
	size_t tl = strlen(tag), nl = strlen(name);
	for (const char *p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, tag, tl) == 0 && p[tl] == ' ' && strncmp(p + tl + 1, name, nl) == 0 &&
		    p[tl + 1 + nl] == ' ')
			return p + tl + 1 + nl + 1;
	}
	return NULL;
}

/* Copies the n-th space-separated token of a line into buf. */
static bool token(const char *line, unsigned n, char *buf, size_t len)
{
	for (unsigned i = 0; i < n; i++) {
		line = strpbrk(line, " \n");
		if (!line || *line == '\n')
			return false;
		line++;
	}
	size_t k = strcspn(line, " \n");
	if (k == 0 || k >= len)
		return false;
	memcpy(buf, line, k);
	buf[k] = '\0';
	return true;
}

/* Asserts that the child printed "C name got want" with got == want. */
static void expect_check(const struct python *py, const char *out, const char *name)
{
	const char *line = find_line(out, "C", name);
	cr_assert_not_null(line, "%s: check %s missing from the child's output:\n%s", py->path,
	                   name, out);
	char got[4096], want[4096];
	cr_assert(token(line, 0, got, sizeof got) && token(line, 1, want, sizeof want),
	          "%s: malformed check %s", py->path, name);
	cr_expect_str_eq(got, want, "%s: %s read %s, Python says %s", py->path, name, got, want);
}

/* The integer the child printed as "V name value". */
static long long child_value(const struct python *py, const char *out, const char *name)
{
	const char *line = find_line(out, "V", name);
	cr_assert_not_null(line, "%s: value %s missing from the child's output:\n%s", py->path,
	                   name, out);
	return strtoll(line, NULL, 10);
}

static void expect_clean_exit(const struct python *py, int status, const char *out)
{
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	          "%s: child failed (status %d), output:\n%s", py->path, status, out);
}

/* ---- the layout of an interpreter ---------------------------------------- */

static const char dump_script[] =
	"import ctypes, sys, sysconfig\n"
	"a = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, '_PyRuntime'))\n"
	"print('R raw', ctypes.string_at(a, 1024).hex())\n"
	"print('V hexversion', sys.hexversion)\n"
	"print('V gil_disabled', int(bool(sysconfig.get_config_var('Py_GIL_DISABLED'))))\n";

struct runtime_dump {
	uint8_t raw[RAW_MAX];
	size_t len;
	unsigned long long hexversion;
	bool gil_disabled;
};

static void dump_runtime(const struct python *py, struct runtime_dump *d)
{
	int status;
	char *out = run_python(py, dump_script, NULL, 0, &status);
	expect_clean_exit(py, status, out);
	const char *hex = find_line(out, "R", "raw");
	cr_assert_not_null(hex, "%s: no _PyRuntime dump", py->path);
	d->len = 0;
	unsigned byte;
	while (d->len < RAW_MAX && sscanf(hex + 2 * d->len, "%2x", &byte) == 1)
		d->raw[d->len++] = (uint8_t)byte;
	cr_assert_eq(d->len, RAW_MAX, "%s: short _PyRuntime dump", py->path);
	d->hexversion = (unsigned long long)child_value(py, out, "hexversion");
	d->gil_disabled = child_value(py, out, "gil_disabled") != 0;
	free(out);
}

/* false (with a warning) for an interpreter we deliberately do not describe. */
static bool layout_of(const struct python *py, struct py_layout *l)
{
	if (py->minor <= 12) {
		const struct py_layout *t = layout_for_minor(py->minor);
		cr_assert_not_null(t, "no table for 3.%u", py->minor);
		*l = *t;
		return true;
	}
	struct runtime_dump d;
	dump_runtime(py, &d);
	size_t size = layout_debug_offsets_size(d.hexversion);
	if (size == 0) {
		cr_log_info("%s: 3.%u build %#llx is a pre-release we do not describe", py->path,
		            py->minor, d.hexversion);
		return false;
	}
	cr_assert_leq(size, d.len);
	cr_assert_eq(layout_from_debug_offsets(d.raw, size, l), 0,
	             "%s: its own _Py_DebugOffsets were rejected", py->path);
	return true;
}

/* The layout as child arguments; ABSENT becomes -1. */
#define LAYOUT_ARGS_MAX 64

struct layout_args {
	char buf[LAYOUT_ARGS_MAX][40];
	char *argv[LAYOUT_ARGS_MAX];
	size_t n;
};

static void arg(struct layout_args *a, const char *key, uint64_t v)
{
	cr_assert_lt(a->n, LAYOUT_ARGS_MAX);
	if (v == LAYOUT_ABSENT)
		snprintf(a->buf[a->n], sizeof a->buf[a->n], "%s=-1", key);
	else
		snprintf(a->buf[a->n], sizeof a->buf[a->n], "%s=%" PRIu64, key, v);
	a->argv[a->n] = a->buf[a->n];
	a->n++;
}

static void layout_args(const struct py_layout *l, struct layout_args *a)
{
	a->n = 0;
	arg(a, "FT", l->free_threaded);
	arg(a, "LINE_MODEL", l->line_model);
	arg(a, "LASTI_MULT", l->lasti_model == LASTI_CODEUNITS ? 2 : 1);
	arg(a, "RT_IH", l->runtime.interpreters_head);
	arg(a, "RT_GIL", l->runtime.gil);
	arg(a, "RT_GC", l->runtime.gc_collecting);
	arg(a, "IS_NEXT", l->interp.next);
	arg(a, "IS_ID", l->interp.id);
	arg(a, "IS_TH", l->interp.threads_head);
	arg(a, "IS_GC", l->interp.gc_collecting);
	arg(a, "IS_GILP", l->interp.gil_ptr);
	arg(a, "GIL_HOLDER", l->gil.last_holder);
	arg(a, "GIL_LOCKED", l->gil.locked);
	arg(a, "TS_NEXT", l->tstate.next);
	arg(a, "TS_INTERP", l->tstate.interp);
	arg(a, "TS_FRAME", l->tstate.frame);
	arg(a, "TS_CFRAME", l->tstate.cframe);
	arg(a, "TS_CFCUR", l->tstate.cframe_current_frame);
	arg(a, "TS_TID", l->tstate.thread_id);
	arg(a, "TS_NTID", l->tstate.native_thread_id);
	arg(a, "TS_CHUNK", l->tstate.datastack_chunk);
	arg(a, "FR_BACK", l->frame.back);
	arg(a, "FR_CODE", l->frame.code);
	arg(a, "FR_LASTI", l->frame.lasti);
	arg(a, "FR_LINENO", l->frame.lineno);
	arg(a, "FR_TRACE", l->frame.trace);
	arg(a, "FR_INSTR", l->frame.instr_ptr);
	arg(a, "FR_OWNER", l->frame.owner);
	arg(a, "FR_ENTRY", l->frame.is_entry);
	arg(a, "FR_TAGMASK", l->frame.code_tag_mask);
	arg(a, "OWNER_GEN", l->frame.owner_generator);
	arg(a, "OWNER_CSTACK", l->frame.owner_cstack);
	arg(a, "OWNER_INTERP", l->frame.owner_interpreter);
	arg(a, "CO_FILENAME", l->code.filename);
	arg(a, "CO_NAME", l->code.name);
	arg(a, "CO_QUALNAME", l->code.qualname);
	arg(a, "CO_LINETABLE", l->code.linetable);
	arg(a, "CO_FIRSTLINENO", l->code.firstlineno);
	arg(a, "CO_ADAPTIVE", l->code.code_adaptive);
	arg(a, "OB_TYPE", l->object.ob_type);
	arg(a, "U_LEN", l->unicode.length);
	arg(a, "U_STATE", l->unicode.state);
	arg(a, "U_ASCII", l->unicode.ascii_size);
	arg(a, "U_COMPACT", l->unicode.compact_size);
	arg(a, "U_LEGACY", l->unicode.legacy_data);
	arg(a, "B_SIZE", l->bytes.ob_size);
	arg(a, "B_SVAL", l->bytes.ob_sval);
}

/* Runs a probe script with the layout as arguments. */
static char *probe(const struct python *py, const struct py_layout *l, const char *script)
{
	struct layout_args a;
	layout_args(l, &a);
	int status;
	char *out = run_python(py, script, a.argv, a.n, &status);
	expect_clean_exit(py, status, out);
	return out;
}

#define PROBE_PRELUDE                                                                    \
	"import ctypes, faulthandler, sys\n"                                             \
	"faulthandler.dump_traceback_later(60, exit=True)\n"                              \
	"L = dict((k, int(v)) for k, v in (a.split('=', 1) for a in sys.argv[1:]))\n"    \
	"def u64(a): return ctypes.c_uint64.from_address(a).value\n"                     \
	"def i64(a): return ctypes.c_int64.from_address(a).value\n"                      \
	"def u32(a): return ctypes.c_uint32.from_address(a).value\n"                     \
	"def i32(a): return ctypes.c_int32.from_address(a).value\n"                      \
	"def u8(a): return ctypes.c_uint8.from_address(a).value\n"                       \
	"def mem(a, n): return (ctypes.c_char * n).from_address(a).raw\n"                \
	"def check(name, got, want): print('C', name, got, want)\n"                      \
	"def value(name, v): print('V', name, v)\n"

/* ---- objects: code, bytes, str, ob_type ---------------------------------- */

static const char objects_script[] = PROBE_PRELUDE
	"\n"
	"\n"
	/* A method far down its file: co_qualname differs from co_name and
	 * co_firstlineno from every small integer field near it. */
	"src = '\\n' * 1000 + 'class Holder:\\n    def sample_function(self, a, b=2):\\n        c = a + b\\n        return c * 2\\n'\n"
	"ns = {}\n"
	"exec(compile(src, '<layout-probe>', 'exec'), ns)\n"
	"co = ns['Holder'].sample_function.__code__\n"
	"a = id(co)\n"
	"check('code.filename', u64(a + L['CO_FILENAME']), id(co.co_filename))\n"
	"check('code.name', u64(a + L['CO_NAME']), id(co.co_name))\n"
	"if L['CO_QUALNAME'] >= 0:\n"
	"    check('code.qualname', u64(a + L['CO_QUALNAME']), id(co.co_qualname))\n"
	"lt = co.co_lnotab if L['LINE_MODEL'] == 0 else co.co_linetable\n"
	"check('code.linetable', u64(a + L['CO_LINETABLE']), id(lt))\n"
	"check('code.firstlineno', i32(a + L['CO_FIRSTLINENO']), co.co_firstlineno)\n"
	"if L['CO_ADAPTIVE'] >= 0:\n"
	"    ad = co._co_code_adaptive\n"
	"    check('code.adaptive', mem(a + L['CO_ADAPTIVE'], len(ad)).hex(), ad.hex())\n"
	"value('code.basicsize', type(co).__basicsize__)\n"
	"value('frame.basicsize', type(sys._getframe()).__basicsize__)\n"
	"for name, obj in (('code', co), ('bytes', b''), ('str', 'x'), ('list', [])):\n"
	"    check('object.ob_type.' + name, u64(id(obj) + L['OB_TYPE']), id(type(obj)))\n"
	"b = bytes(range(40, 90)) + b'\\x00pyprofd\\xff'\n"
	"check('bytes.ob_size', i64(id(b) + L['B_SIZE']), len(b))\n"
	"check('bytes.ob_sval', mem(id(b) + L['B_SVAL'], len(b) + 1).hex(), (b + b'\\x00').hex())\n"
	"value('bytes.basicsize', bytes.__basicsize__)\n"
	"value('str.basicsize', str.__basicsize__)\n"
	"value('str.sizeof_empty', sys.getsizeof(''))\n"
	"value('str.sizeof_latin1_2', sys.getsizeof(''.join(['\\xe9', 'x'])))\n"
	"class Legacy(str):\n"
	"    pass\n"
	"strings = [\n"
	"    ('ascii', ''.join(['ascii-', 'compact']), 'ascii'),\n"
	"    ('latin1', ''.join(['caf\\xe9-', 'latin1']), 'compact'),\n"
	"    ('ucs2', ''.join(['euro-\\u20ac-', 'ucs2']), 'compact'),\n"
	"    ('ucs4', ''.join(['smile-\\U0001f600-', 'ucs4']), 'compact'),\n"
	"    ('legacy_ascii', Legacy('legacy-ascii'), 'legacy'),\n"
	"    ('legacy_ucs2', Legacy('legacy-\\u20ac'), 'legacy'),\n"
	"]\n"
	"for name, s, rep in strings:\n"
	"    m = max(map(ord, s))\n"
	"    kind = 1 if m < 256 else 2 if m < 65536 else 4\n"
	"    want = str(s).encode({1: 'latin-1', 2: 'utf-16-le', 4: 'utf-32-le'}[kind])\n"
	"    o = id(s)\n"
	"    if rep == 'ascii':\n"
	"        data = o + L['U_ASCII']\n"
	"    elif rep == 'compact':\n"
	"        data = o + L['U_COMPACT']\n"
	"    else:\n"
	"        data = u64(o + L['U_LEGACY'])\n"
	"    print('U', name, u32(o + L['U_STATE']), kind, int(m < 128), int(rep != 'legacy'),\n"
	"          i64(o + L['U_LEN']), len(s), mem(data, len(want)).hex(), want.hex())\n";

/* state bits: interned:2 kind:3 compact:1 ascii:1 (see layout.h) */
static void expect_string(const struct python *py, const struct py_layout *l, const char *out,
                          const char *name)
{
	const char *line = find_line(out, "U", name);
	cr_assert_not_null(line, "%s: string %s missing:\n%s", py->path, name, out);
	char tok[8][1024];
	for (unsigned i = 0; i < 8; i++)
		cr_assert(token(line, i, tok[i], sizeof tok[i]), "%s: malformed string line %s",
		          py->path, name);
	unsigned long state = strtoul(tok[0], NULL, 10);
	cr_expect_str_eq(tok[4], tok[5], "%s: %s: length field %s, len() %s", py->path, name,
	                 tok[4], tok[5]);
	cr_expect_str_eq(tok[6], tok[7], "%s: %s: characters read %s, expected %s", py->path,
	                 name, tok[6], tok[7]);
	/* Free-threaded 3.14+ keeps `interned` in a whole byte: the bit
	 * positions below are those of the default builds the walker reads. */
	if (l->free_threaded && py->minor >= 14)
		return;
	cr_expect_eq((state >> 2) & 7, strtoul(tok[1], NULL, 10), "%s: %s: kind", py->path, name);
	cr_expect_eq((state >> 6) & 1, strtoul(tok[2], NULL, 10), "%s: %s: ascii", py->path, name);
	cr_expect_eq((state >> 5) & 1, strtoul(tok[3], NULL, 10), "%s: %s: compact", py->path,
	             name);
}

static void check_objects(const struct python *py, const struct py_layout *l)
{
	char *out = probe(py, l, objects_script);

	expect_check(py, out, "code.filename");
	expect_check(py, out, "code.name");
	if (l->code.qualname != LAYOUT_ABSENT)
		expect_check(py, out, "code.qualname");
	expect_check(py, out, "code.linetable");
	expect_check(py, out, "code.firstlineno");
	if (l->code.code_adaptive != LAYOUT_ABSENT)
		expect_check(py, out, "code.adaptive");
	cr_expect_leq(l->code.size, child_value(py, out, "code.basicsize"),
	              "%s: code.size reads past PyCodeObject", py->path);
	if (l->frame_model == FRAME_MODEL_OBJECT)
		cr_expect_leq(l->frame.size, child_value(py, out, "frame.basicsize"),
		              "%s: frame.size reads past PyFrameObject", py->path);

	expect_check(py, out, "object.ob_type.code");
	expect_check(py, out, "object.ob_type.bytes");
	expect_check(py, out, "object.ob_type.str");
	expect_check(py, out, "object.ob_type.list");

	expect_check(py, out, "bytes.ob_size");
	expect_check(py, out, "bytes.ob_sval");
	/* PyBytesObject's basic size is offsetof(ob_sval) + 1 for the NUL. */
	cr_expect_eq(l->bytes.ob_sval + 1, child_value(py, out, "bytes.basicsize"), "%s",
	             py->path);

	cr_expect_eq(l->unicode.legacy_data + 8, child_value(py, out, "str.basicsize"),
	             "%s: legacy data pointer is not the last field of PyUnicodeObject", py->path);
	cr_expect_eq(l->unicode.ascii_size + 1, child_value(py, out, "str.sizeof_empty"), "%s",
	             py->path);
	cr_expect_eq(l->unicode.compact_size + 3, child_value(py, out, "str.sizeof_latin1_2"),
	             "%s", py->path);
	expect_string(py, l, out, "ascii");
	expect_string(py, l, out, "latin1");
	expect_string(py, l, out, "ucs2");
	expect_string(py, l, out, "ucs4");
	expect_string(py, l, out, "legacy_ascii");
	expect_string(py, l, out, "legacy_ucs2");
	free(out);
}

/* ---- runtime, interpreters, threads, frames, GIL, GC --------------------- */

/*
 * The current frame is read with inline ctypes expressions only: any Python
 * helper called in between would itself be the current frame.
 */
static const char state_script[] = PROBE_PRELUDE
	"import gc, threading, time\n"
	"api = ctypes.pythonapi\n"
	"api.PyThreadState_Get.restype = ctypes.c_void_p\n"
	"api.PyInterpreterState_Main.restype = ctypes.c_void_p\n"
	"ts = api.PyThreadState_Get()\n"
	"interp = api.PyInterpreterState_Main()\n"
	"rt = ctypes.addressof(ctypes.c_char.in_dll(api, '_PyRuntime'))\n"
	"mask = ~L['FR_TAGMASK']\n"
	"TSF, CF, CUR = L['TS_FRAME'], L['TS_CFRAME'], L['TS_CFCUR']\n"
	"check('tstate.interp', u64(ts + L['TS_INTERP']), interp)\n"
	"check('runtime.interpreters_head', u64(rt + L['RT_IH']), interp)\n"
	"check('interp.threads_head', u64(interp + L['IS_TH']), ts)\n"
	"check('tstate.thread_id', u64(ts + L['TS_TID']), threading.get_ident())\n"
	"if L['TS_NTID'] >= 0:\n"
	"    check('tstate.native_thread_id', u64(ts + L['TS_NTID']), threading.get_native_id())\n"
	"gca = rt + L['RT_GC'] if L['RT_GC'] >= 0 else interp + L['IS_GC']\n"
	"seen = []\n"
	"def gc_cb(phase, info):\n"
	"    if phase == 'start':\n"
	"        seen.append(i32(gca))\n"
	"gc.callbacks.append(gc_cb)\n"
	"gc.collect()\n"
	"gc.callbacks.remove(gc_cb)\n"
	"check('gc.collecting_idle', i32(gca), 0)\n"
	"check('gc.collecting_during', seen[0] if seen else -1, 1)\n"
	"\n"
	"def frame_probe():\n"
	"    fr = ctypes.c_uint64.from_address(ts + TSF).value if TSF >= 0 else ctypes.c_uint64.from_address(ctypes.c_uint64.from_address(ts + CF).value + CUR).value\n"
	"    me = sys._getframe()\n"
	"    back = u64(fr + L['FR_BACK'])\n"
	"    if L['FR_LASTI'] >= 0:\n"
	"        check('frame.current', fr, id(me))\n"
	"        check('frame.back', back, id(me.f_back))\n"
	"        check('frame.code', u64(fr + L['FR_CODE']), id(me.f_code))\n"
	"        check('frame.lasti', i32(back + L['FR_LASTI']) * L['LASTI_MULT'], me.f_back.f_lasti)\n"
	"        return\n"
	"    check('frame.code', u64(fr + L['FR_CODE']) & mask, id(me.f_code))\n"
	"    check('frame.back_code', u64(back + L['FR_CODE']) & mask, id(me.f_back.f_code))\n"
	"    check('frame.owner_thread', u8(fr + L['FR_OWNER']), 0)\n"
	"    if L['FR_ENTRY'] >= 0:\n"
	"        check('frame.is_entry_inner', u8(fr + L['FR_ENTRY']), 0)\n"
	"        check('frame.is_entry_outer', u8(back + L['FR_ENTRY']), 1)\n"
	"    ip = u64(fr + L['FR_INSTR'])\n"
	"    start = id(me.f_code) + L['CO_ADAPTIVE']\n"
	"    check('frame.instr_ptr', int(start <= ip < start + len(me.f_code.co_code)), 1)\n"
	"    chunk = u64(ts + L['TS_CHUNK'])\n"
	"    check('tstate.datastack_chunk', int(chunk <= fr < chunk + u64(chunk + 8)), 1)\n"
	"    owners, p = [], fr\n"
	"    while p and len(owners) < 64:\n"
	"        owners.append(u8(p + L['FR_OWNER']))\n"
	"        p = u64(p + L['FR_BACK'])\n"
	"    shim = L['OWNER_INTERP'] if L['OWNER_INTERP'] != 255 else L['OWNER_CSTACK']\n"
	"    if shim != 255:\n"
	"        check('frame.shim_owner', int(shim in owners), 1)\n"
	"frame_probe()\n"
	"\n"
	"def gen_probe():\n"
	"    fr = ctypes.c_uint64.from_address(ts + TSF).value if TSF >= 0 else ctypes.c_uint64.from_address(ctypes.c_uint64.from_address(ts + CF).value + CUR).value\n"
	"    me = sys._getframe()\n"
	"    if L['FR_OWNER'] >= 0:\n"
	"        check('generator.owner', u8(fr + L['FR_OWNER']), L['OWNER_GEN'])\n"
	"        check('generator.code', u64(fr + L['FR_CODE']) & mask, id(me.f_code))\n"
	"    else:\n"
	"        check('generator.code', u64(fr + L['FR_CODE']), id(me.f_code))\n"
	"    yield 1\n"
	"next(gen_probe())\n"
	"\n"
	"if L['FR_TRACE'] >= 0:\n"
	"    lines = []\n"
	"    def tracer(frame, event, arg):\n"
	"        if event == 'line' and frame.f_code is traced.__code__:\n"
	"            lines.append((i32(id(frame) + L['FR_LINENO']), frame.f_lineno))\n"
	"        return tracer\n"
	"    def traced():\n"
	"        fr = ctypes.c_uint64.from_address(ts + TSF).value\n"
	"        return u64(fr + L['FR_TRACE'])\n"
	"    sys.settrace(tracer)\n"
	"    trace = traced()\n"
	"    sys.settrace(None)\n"
	"    check('frame.trace', trace, id(tracer))\n"
	"    check('frame.lineno', lines[-1][0] if lines else -1, lines[-1][1] if lines else 0)\n"
	"    check('frame.lineno_known', int(bool(lines) and lines[-1][1] > 0), 1)\n"
	"\n"
	"started, stop = threading.Event(), threading.Event()\n"
	"def worker():\n"
	"    started.set()\n"
	"    stop.wait()\n"
	"    for _ in range(5):\n"
	"        time.sleep(0.001)\n"
	"t = threading.Thread(target=worker, daemon=True)\n"
	"t.start()\n"
	"started.wait()\n"
	"try:\n"
	"    ids, nids, interps, p = [], [], [], u64(interp + L['IS_TH'])\n"
	"    while p and len(ids) < 64:\n"
	"        ids.append(u64(p + L['TS_TID']))\n"
	"        if L['TS_NTID'] >= 0:\n"
	"            nids.append(u64(p + L['TS_NTID']))\n"
	"        interps.append(u64(p + L['TS_INTERP']))\n"
	"        p = u64(p + L['TS_NEXT'])\n"
	"    check('threads.main', int(threading.get_ident() in ids), 1)\n"
	"    check('threads.worker', int(t.ident in ids), 1)\n"
	"    if L['TS_NTID'] >= 0:\n"
	"        check('threads.worker_native', int(t.native_id in nids), 1)\n"
	"    check('threads.interp', int(set(interps) == {interp}), 1)\n"
	"finally:\n"
	"    stop.set()\n"
	"    t.join()\n"
	"# The GIL has changed hands a few times by now, so the words around\n"
	"# `locked` (switch counters) no longer happen to read 1.\n"
	"if not L['FT']:\n"
	"    g = rt + L['RT_GIL'] if L['RT_GIL'] >= 0 else u64(interp + L['IS_GILP'])\n"
	"    check('gil.locked', i32(g + L['GIL_LOCKED']), 1)\n"
	"    check('gil.last_holder', u64(g + L['GIL_HOLDER']), ts)\n"
	"\n"
	"check('interp.main_id', i64(interp + L['IS_ID']), 0)\n"
	"si = None\n"
	"for mod in ('_interpreters', '_xxsubinterpreters'):\n"
	"    try:\n"
	"        si = __import__(mod)\n"
	"        break\n"
	"    except ImportError:\n"
	"        pass\n"
	"if si is not None:\n"
	"    sub = si.create()\n"
	"    head = u64(rt + L['RT_IH'])\n"
	"    check('interp.new_head', int(head != interp), 1)\n"
	"    check('interp.next', u64(head + L['IS_NEXT']), interp)\n"
	"    check('interp.id', i64(head + L['IS_ID']), int(sub))\n"
	"    si.destroy(sub)\n"
	"else:\n"
	"    print('S subinterpreters')\n";

static void check_state(const struct python *py, const struct py_layout *l)
{
	char *out = probe(py, l, state_script);

	expect_check(py, out, "tstate.interp");
	expect_check(py, out, "runtime.interpreters_head");
	expect_check(py, out, "interp.threads_head");
	expect_check(py, out, "tstate.thread_id");
	if (l->tstate.native_thread_id != LAYOUT_ABSENT)
		expect_check(py, out, "tstate.native_thread_id");
	if (!l->free_threaded) {
		expect_check(py, out, "gil.locked");
		expect_check(py, out, "gil.last_holder");
	}
	expect_check(py, out, "gc.collecting_idle");
	expect_check(py, out, "gc.collecting_during");

	expect_check(py, out, "frame.code");
	expect_check(py, out, "generator.code");
	if (l->frame_model == FRAME_MODEL_OBJECT) {
		expect_check(py, out, "frame.current");
		expect_check(py, out, "frame.back");
		expect_check(py, out, "frame.lasti");
		expect_check(py, out, "frame.lineno");
		expect_check(py, out, "frame.lineno_known");
		expect_check(py, out, "frame.trace");
	} else {
		expect_check(py, out, "frame.back_code");
		expect_check(py, out, "frame.owner_thread");
		expect_check(py, out, "generator.owner");
		expect_check(py, out, "tstate.datastack_chunk");
		/* In free-threaded builds only the main thread is sure to run
		 * co_code_adaptive itself (thread-local bytecode index 0). */
		expect_check(py, out, "frame.instr_ptr");
		if (l->frame.is_entry != LAYOUT_ABSENT) {
			expect_check(py, out, "frame.is_entry_inner");
			expect_check(py, out, "frame.is_entry_outer");
		}
		if (l->frame.owner_interpreter != LAYOUT_OWNER_NONE ||
		    l->frame.owner_cstack != LAYOUT_OWNER_NONE)
			expect_check(py, out, "frame.shim_owner");
	}

	expect_check(py, out, "threads.main");
	expect_check(py, out, "threads.worker");
	if (l->tstate.native_thread_id != LAYOUT_ABSENT)
		expect_check(py, out, "threads.worker_native");
	expect_check(py, out, "threads.interp");

	expect_check(py, out, "interp.main_id");
	if (strstr(out, "S subinterpreters\n")) {
		cr_log_info("%s: no subinterpreter module, interp.id/next of a second "
		            "interpreter not checked", py->path);
	} else {
		expect_check(py, out, "interp.new_head");
		expect_check(py, out, "interp.next");
		expect_check(py, out, "interp.id");
	}
	free(out);
}

/* ---- _Py_DebugOffsets of the live interpreter ---------------------------- */

static void check_debug_offsets(const struct python *py, const struct py_layout *l)
{
	struct runtime_dump d;
	dump_runtime(py, &d);
	struct py_layout parsed;
	if (py->minor <= 12) {
		/* Nothing to parse: the table must be the one we use. */
		cr_expect_neq(layout_from_debug_offsets(d.raw, d.len, &parsed), 0,
		              "%s: found debug offsets in a 3.%u", py->path, py->minor);
		cr_expect_eq(l->minor, py->minor);
		return;
	}
	cr_expect_null(layout_for_minor(py->minor));
	cr_expect_eq(d.hexversion >> 16, 0x300u | py->minor);
	size_t size = layout_debug_offsets_size(d.hexversion);
	cr_assert_gt(size, 0);
	if (py->minor == 13)
		cr_expect_eq(size, 584);
	if (py->minor == 14)
		cr_expect_eq(size, 760);
	/* 3.15.2's pycore_debug_offsets.h: 108 fields after the 24-byte head. */
	if (py->minor == 15)
		cr_expect_eq(size, 888);
	cr_assert_eq(layout_from_debug_offsets(d.raw, size, &parsed), 0);
	cr_expect_eq(parsed.minor, py->minor);
	cr_expect_eq(parsed.free_threaded, d.gil_disabled, "%s: free_threaded", py->path);
	cr_expect_eq(parsed.frame_model, FRAME_MODEL_INTERP);
	cr_expect_eq(parsed.line_model, LINE_MODEL_LOCATIONS);
	cr_expect_eq(parsed.lasti_model, LASTI_INSTR_PTR);
	/* One byte short must not parse: remote bytes are never read past len. */
	cr_expect_eq(layout_from_debug_offsets(d.raw, size - 1, &parsed), -1);
	uint8_t bad[RAW_MAX];
	memcpy(bad, d.raw, sizeof bad);
	bad[0] ^= 0x20;
	cr_expect_eq(layout_from_debug_offsets(bad, size, &parsed), -1, "cookie not checked");
}

/* ---- one test per area and minor version --------------------------------- */

typedef void (*live_check)(const struct python *, const struct py_layout *);

static void run_live(unsigned minor, live_check check)
{
	struct python all[PYTHONS_MAX];
	size_t n = pythons_find(all, PYTHONS_MAX), ran = 0;
	for (size_t i = 0; i < n; i++) {
		if (all[i].major != 3 || all[i].minor != minor)
			continue;
		struct py_layout l;
		if (!layout_of(&all[i], &l))
			continue;
		cr_log_info("checking %s", all[i].path);
		check(&all[i], &l);
		ran++;
	}
	if (ran == 0)
		cr_skip_test("no usable CPython 3.%u found", minor);
}

#define LIVE_TESTS(minor)                                                                \
	Test(layout_live, objects_3_##minor, .timeout = 120)                             \
	{                                                                                \
		run_live(minor, check_objects);                                          \
	}                                                                                \
	Test(layout_live, state_3_##minor, .timeout = 120)                               \
	{                                                                                \
		run_live(minor, check_state);                                            \
	}                                                                                \
	Test(layout_live, debug_offsets_3_##minor, .timeout = 120)                       \
	{                                                                                \
		run_live(minor, check_debug_offsets);                                    \
	}

LIVE_TESTS(8)
LIVE_TESTS(9)
LIVE_TESTS(10)
LIVE_TESTS(11)
LIVE_TESTS(12)
LIVE_TESTS(13)
LIVE_TESTS(14)
LIVE_TESTS(15)
