/*
 * What a task is called in a profile: its <task>:NAME frame.
 *
 * A task the program named keeps its name.  One it did not carries
 * asyncio's own name, Task-N (an int N from 3.12, the str "Task-N"
 * before), which only counts tasks: a service that makes a task per
 * request would get a frame per request, and the history and every export
 * a name per request.  Such a task is called after the coroutine it runs
 * (its code's qualified name), so there is one name per kind of task.
 *
 * And a process has at most TASKS_LABELS_MAX names in all, however it
 * names its tasks: past them every new name folds into TASKS_LABEL_OTHER,
 * counted as task_names_folded.  The names made so far outlive the caches'
 * resets, so a name keeps its frame for the life of the target.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tasks_state.h"

/* The key of a label: what it names, by kind, then by string id. */
enum { LABEL_CHOSEN = 1, LABEL_CORO = 2, LABEL_UNKNOWN_CORO = 3 };

static bool tasks_name_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct tasks *ts = ctx;
	return ts->names[id].obj == *(const raddr_t *)key;
}

static bool tasks_label_equal(const void *ctx, uint32_t id, const void *key)
{
	const struct tasks *ts = ctx;
	return ts->labels[id].key == *(const uint64_t *)key;
}

/*
 * Whether s is the name asyncio gives a task it was not given one: "Task-"
 * and the number as asyncio writes it (no leading zero).  *number is it.
 */
static bool tasks_default_name(const char *s, uint64_t *number)
{
	if (strncmp(s, "Task-", 5) != 0 || s[5] < '1' || s[5] > '9')
		return false;
	uint64_t n = 0;
	/* s is a name read already, at most STR_KEEP_LENGTH characters. */
	for (const char *d = s + 5; *d; d++) {
		if (*d < '0' || *d > '9' || n > (UINT64_MAX - 9) / 10)
			return false;
		n = n * 10 + (uint64_t)(*d - '0');
	}
	*number = n;
	return true;
}

/* The value of a small non-negative int object (a task named "Task-N" by number from 3.12). */
static int tasks_read_small_int(struct uw_target *t, const struct asyncio_layout *L, raddr_t obj,
                                uint64_t *value, struct uw_error *err)
{
	uint8_t b[LAYOUT_ASYNCIO_OBJECT_BYTES];
	if (L->long_digit + 8 > sizeof b)
		return uw_fail(err, UW_ECORRUPT, "task name 0x%llx: an int past what is read", (unsigned long long)obj);
	if (tasks_read(t, obj, b, L->long_digit + 8, err) != 0)
		return -1;
	uint64_t size = load_u64(b, L->long_size);
	uint64_t ndigits = L->long_tagged ? size >> 3 : size;
	if ((L->long_tagged && (size & 3) == 2) || ndigits > 2)
		return uw_fail(err, UW_ECORRUPT, "task name 0x%llx: not a str nor a small int",
		               (unsigned long long)obj);
	uint64_t lo = ndigits > 0 ? load_u32(b, L->long_digit) : 0;
	uint64_t hi = ndigits > 1 ? load_u32(b, L->long_digit + 4) : 0;
	*value = lo | hi << 30;
	return 0;
}

/* The first TASKS_NAME_MAX bytes of a UTF-8 name, cut where a character begins. */
static size_t tasks_name_len(const char *s)
{
	size_t len = strlen(s);
	if (len <= TASKS_NAME_MAX)
		return len;
	len = TASKS_NAME_MAX;
	while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
		len--;
	return len;
}

/* A name object read now: chosen by the program (a str), or asyncio's Task-N. */
static int tasks_name_fresh(struct uw_target *t, struct tasks *ts, raddr_t obj, struct task_name *nm,
                            struct uw_error *err)
{
	/* The object's header, as long as the build's (free-threaded: 32 bytes). */
	uint8_t hdr[LAYOUT_ASYNCIO_OBJECT_BYTES];
	uint32_t hdr_len = t->layout.object.ob_type + 8;
	if (!obj || hdr_len > sizeof hdr || tasks_read(t, obj, hdr, hdr_len, err) != 0)
		return uw_fail(err, UW_ECORRUPT, "task name at 0x%llx unreadable", (unsigned long long)obj);
	if (load_u64(hdr, t->layout.object.ob_type) != t->unicode_type)
		return tasks_read_small_int(t, &ts->L, obj, &nm->number, err);
	char *s = pyobj_read_utf8(t, obj, err);
	if (!s)
		return -1;
	nm->chosen = !tasks_default_name(s, &nm->number);
	if (nm->chosen && (nm->str = intern_string(&t->intern, s, tasks_name_len(s))) == INTERN_FAILED) {
		free(s);
		return uw_fail(err, UW_ENOMEM, "out of memory");
	}
	free(s);
	return 0;
}

/* A task's name object, read or (read lately) remembered by its address. */
int tasks_name_read(struct uw_target *t, struct tasks *ts, raddr_t obj, struct task_name *out,
                    struct uw_error *err)
{
	uint32_t h = hash_u64(obj);
	uint32_t id = hash_find(&ts->names_index, h, tasks_name_equal, ts, &obj);
	if (id != HASH_NONE && t->sample_gen - ts->names[id].gen < TASKS_NAME_REFRESH) {
		*out = ts->names[id];
		return 0;
	}
	struct task_name nm = {.obj = obj, .gen = t->sample_gen};
	if (tasks_name_fresh(t, ts, obj, &nm, err) != 0)
		return -1;
	if (id == HASH_NONE && ts->nnames >= TASKS_NAMES_CACHED) {
		/* Name objects come and go with their tasks: start the memory of them again. */
		ts->nnames = 0;
		hash_clear(&ts->names_index);
	}
	if (id == HASH_NONE) {
		if (array_reserve((void **)&ts->names, &ts->names_cap, ts->nnames, sizeof *ts->names, NULL) ||
		    hash_reserve(&ts->names_index, 1) != 0)
			return uw_fail(err, UW_ENOMEM, "out of memory");
		id = ts->nnames++;
		hash_fill(&ts->names_index, hash_probe(&ts->names_index, h, tasks_name_equal, ts, &obj), h, id);
	}
	ts->names[id] = nm;
	*out = nm;
	return 0;
}

/*
 * The frame of a label's text, within the bound: a text met before keeps
 * its frame, a new one takes a place while there is one, and past them it
 * is TASKS_LABEL_OTHER.
 */
static uint32_t tasks_label_frame(struct uw_target *t, struct tasks *ts, const char *text, size_t len)
{
	int64_t unused;
	if (!hash_map_get(&ts->labels_made, text, len, &unused)) {
		if (ts->labels_made.len < TASKS_LABELS_MAX) {
			if (hash_map_put(&ts->labels_made, text, len, 0) != 0)
				return INTERN_FAILED;
		} else {
			t->stats.task_names_folded++;
			text = TASKS_LABEL_OTHER;
			len = strlen(text);
		}
	}
	struct frame_key key = {.line = -1, .kind = UW_FRAME_PYTHON};
	key.function = key.qualname = intern_string(&t->intern, text, len);
	if (key.function == INTERN_FAILED)
		return INTERN_FAILED;
	return intern_frame(&t->intern, &key);
}

/*
 * Task e's name as the profile shows it (e->marker): the name the program
 * chose (e->name), else its coroutine's qualified name.
 */
int tasks_label(struct uw_target *t, struct tasks *ts, struct task_entry *e, struct uw_error *err)
{
	const char *what = NULL;
	uint64_t key;
	if (e->name != TASKS_NONE) {
		key = (uint64_t)LABEL_CHOSEN << 32 | e->name;
		what = t->intern.strs[e->name];
	} else {
		struct uw_error code_err = {0};
		struct code_info *ci = e->coro_code ? code_get(t, e->coro_code, &code_err) : NULL;
		if (!ci && code_err.status == UW_ENOMEM) {
			*err = code_err;
			return -1;
		}
		/* A coroutine that is not CPython's own (its frame holds no code): one name for all such. */
		key = ci ? (uint64_t)LABEL_CORO << 32 | ci->qualname : (uint64_t)LABEL_UNKNOWN_CORO << 32;
		what = ci ? t->intern.strs[ci->qualname] : "Task-\u2026";
	}
	uint32_t h = hash_u64(key);
	uint32_t id = hash_find(&ts->labels_index, h, tasks_label_equal, ts, &key);
	if (id != HASH_NONE) {
		e->marker = ts->labels[id].marker;
		return 0;
	}
	char text[TASKS_NAME_MAX + 16];
	int len = snprintf(text, sizeof text, "<task>:%.*s", (int)tasks_name_len(what), what);
	if (len < 0 || (size_t)len >= sizeof text)
		len = (int)strlen(text);
	if ((e->marker = tasks_label_frame(t, ts, text, (size_t)len)) == INTERN_FAILED)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	if (ts->nlabels >= TASKS_LABELS_CACHED) {
		ts->nlabels = 0;
		hash_clear(&ts->labels_index);
	}
	if (array_reserve((void **)&ts->labels, &ts->labels_cap, ts->nlabels, sizeof *ts->labels, NULL) ||
	    hash_reserve(&ts->labels_index, 1) != 0)
		return uw_fail(err, UW_ENOMEM, "out of memory");
	id = ts->nlabels++;
	ts->labels[id] = (struct task_label){.key = key, .marker = e->marker};
	hash_fill(&ts->labels_index, hash_probe(&ts->labels_index, h, tasks_label_equal, ts, &key), h, id);
	return 0;
}

/* The string and frame ids the names and labels hold were of the epoch that ended. */
void tasks_names_new_epoch(struct tasks *ts, uint64_t epoch)
{
	if (ts->epoch == epoch)
		return;
	ts->nnames = ts->nlabels = 0;
	hash_clear(&ts->names_index);
	hash_clear(&ts->labels_index);
	ts->epoch = epoch;
}

void tasks_names_free(struct tasks *ts)
{
	free(ts->names);
	hash_free(&ts->names_index);
	free(ts->labels);
	hash_free(&ts->labels_index);
	hash_map_clear(&ts->labels_made);
}

/* The name Task.get_name() gives: the chosen one, or Task-N spelled out.  INTERN_FAILED when out of memory. */
uint32_t tasks_display_name(struct uw_target *t, const struct task_entry *e)
{
	if (e->name != TASKS_NONE)
		return e->name;
	char name[32];
	int len = snprintf(name, sizeof name, "Task-%llu", (unsigned long long)e->number);
	return intern_string(&t->intern, name, (size_t)len);
}
