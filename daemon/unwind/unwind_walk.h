/*
 * A sample under way: the view of remote memory (view.c), the walk and
 * what it reads (walk.c, frames.c, validate.c, chain.c), the modes that
 * read more (exception.c, tasks.c), the kernel's programs (kstill.c,
 * kcopy.c, kread.c) and the threads' bookkeeping (threads.c).  Internal to
 * daemon/unwind, through unwind_internal.h.
 */
#ifndef PYPROFD_UNWIND_WALK_H
#define PYPROFD_UNWIND_WALK_H

#include "kernel.h"
#include "unwind_state.h"

/* code.c */
/*
 * The decoded code object at addr, validated against the target this
 * sample: a freed and reused address is decoded again.  NULL and *err.
 */
struct code_info *code_get(struct uw_target *t, raddr_t addr, struct uw_error *err);

/* Whether code_get of addr would answer from the cache, its header checked this sample already. */
bool code_checked(const struct uw_target *t, raddr_t addr);

/*
 * Free-threaded builds: *pos, an instruction of copy `index` of ci's
 * bytecode (a thread's own), made the same instruction of ci's.  0, or -1
 * and *err when the copy cannot be found or pos is not in it.
 */
int code_tlbc_pos(struct uw_target *t, struct code_info *ci, uint32_t index, uint64_t *pos,
                  struct uw_error *err);
/* The frame id of the instruction at pos in ci (pos as struct chain_link). */
uint32_t code_frame_at(struct uw_target *t, struct code_info *ci, uint64_t pos);

/*
 * Whether a function (co_name in a file) is one of the standard library's
 * waits: innermost, without the GIL, it sits in a blocking call.
 */
bool code_known_wait(const char *name, const char *file);

/* Read a str object into a string id (bounded length). INTERN_FAILED and *err. */
uint32_t pyobj_read_str(struct uw_target *t, raddr_t addr, struct uw_error *err);
/* The same as UTF-8 of the caller's to free, not interned.  NULL and *err. */
char *pyobj_read_utf8(struct uw_target *t, raddr_t addr, struct uw_error *err);
/* The most bytes pyobj_read_str_into writes. */
#define PYOBJ_STR_INTO_MAX 256u
/* A str object as UTF-8 into out (cap bytes, cut at a whole character), allocating nothing.  0, or -1 and *err. */
int pyobj_read_str_into(struct uw_target *t, raddr_t addr, char *out, size_t cap,
                        struct uw_error *err);

/* view.c */
/*
 * len bytes at addr, from the sample's batched read when it holds them, else
 * read now.  The pointer lives until the sample ends.  NULL and *err.
 * `grow` asks the next sample's batch to read that much past the end too.
 */
const uint8_t *view_read(struct uw_target *t, raddr_t addr, uint32_t len, uint32_t grow,
                         struct uw_error *err);
/*
 * As a sample begins, on its look's word (the process's tasks, n of them:
 * still_tasks): whether the kernel copies the process, and when, before
 * the next one (view.c).
 */
void view_copy_window(struct uw_target *t, const struct kstill_task *tasks, uint32_t n);
/*
 * Start a sample: issue the batched read planned by the last one, or take
 * the kernel's copy of it when this sample's look (the process's tasks, n
 * of them: still_tasks) proves it the process's memory now.
 */
int view_begin(struct uw_target *t, const struct kstill_task *tasks, uint32_t n, struct uw_error *err);
/*
 * Read again, in one batch of their own, the reads made since `mark` (the
 * count of reads when one thread's walk began): after a torn read, a fresh
 * copy of that stack beats a walk frame by frame.  Later reads look in it
 * first, until view_retry_end().  Pointers from earlier retries are invalid.
 */
/*
 * A thread proven still makes the reads its last walk made, as far as the
 * plan the batch came from holds them (*from, *n: where they lie there, and
 * where they lie now): the next plan is this one again.
 */
void view_reads_carry(struct uw_target *t, raddr_t owner, uint32_t *from, uint32_t *n);
uint32_t view_mark(const struct uw_target *t);
/*
 * Room for bytes another read of this sample brings in (validate.c's
 * re-read), to be handed to view_keep once read: later reads of them find
 * them as a miss's, no read of their own.  NULL when they are at hand
 * already or the view would not keep them (a retry, or its caches off, or
 * no room: view_keep_room says how many more it keeps).
 */
uint32_t view_keep_room(const struct uw_target *t);
uint8_t *view_room_for(struct uw_target *t, raddr_t addr, uint32_t len);
void view_keep(struct uw_target *t, const struct remote_range *r);
/*
 * Reads ahead, for a reader that knows what it will read next (the task
 * reader, a level of tasks at a time): view_ahead asks for len bytes at
 * addr (nothing when the sample holds them already), view_ahead_read makes
 * every read asked since the last in one batch (a range that faults is
 * left out), and view_read then finds them by their address.  The bytes
 * live until view_ahead_clear or the sample's end.  0, or -1 and *err.
 */
int view_ahead(struct uw_target *t, raddr_t addr, uint32_t len, struct uw_error *err);
int view_ahead_read(struct uw_target *t, struct uw_error *err);
void view_ahead_clear(struct uw_target *t);
/* The bytes at addr this sample holds already (its batch, its misses, its reads ahead), or NULL. */
const uint8_t *view_at_hand(const struct uw_target *t, raddr_t addr, uint32_t len);
/* The bytes at addr in this sample's batch, or NULL (nothing read, nothing remembered). */
const uint8_t *view_batch_bytes(const struct uw_target *t, raddr_t addr, uint32_t len);
/* The reads made since mark (*n of them), valid until the next read. */
const struct used_range *view_reads(const struct uw_target *t, uint32_t mark, uint32_t *n);
/* Count reads as made again (their bytes were found in the batch), for the next plan. */
void view_reads_again(struct uw_target *t, const struct used_range *reads, uint32_t n);
int view_retry(struct uw_target *t, uint32_t mark, struct uw_error *err);
void view_retry_end(struct uw_target *t);
/* End a sample: plan the next batch from what this one read; free scratch. */
void view_end(struct uw_target *t, bool plan_next);
void view_free(struct uw_target *t);
/* Bytes the view's working arrays hold between samples; and giving them back, plan kept. */
size_t view_room(const struct uw_target *t);
void view_trim(struct uw_target *t);

/* walk.c */
/* What a check's bytes are to the thread's stack. */
enum check_role {
	CHECK_LINKS,   /* a frame's links (code, caller, a caller's instruction) */
	CHECK_CURRENT, /* the pointer to the thread's innermost frame */
	CHECK_PATH,    /* a pointer on the way to that one (3.11-3.12's cframe) */
	CHECK_BOUND,   /* the data stack's top: it moves with the innermost frame */
};

/* A few bytes the walk relied on, read again to prove they did not move. */
struct check {
	raddr_t addr;
	raddr_t frame; /* the frame whose links these are; 0 for the thread's pointers */
	uint32_t len;
	uint32_t range; /* validate_stack: the re-read range that holds it */
	uint8_t role;   /* enum check_role */
	bool in_base;   /* validate_stack: a frame's as in the last sample, not read again */
	bool reread;    /* validate_stack: read again */
	bool changed;   /* validate_stack: read again, and not as the walk saw it */
	uint8_t expect[24];
};

/* One frame as read, before it is decoded. */
struct raw_frame {
	raddr_t addr;
	raddr_t code;
	uint64_t pos;
	uint32_t kind;
	uint32_t tlbc; /* free-threaded: the thread's bytecode copy pos lies in (0: the code's own) */
};

/*
 * A sample under way; kept by the target so its arrays are reused, not
 * reallocated: a steady sample allocates nothing.
 */
struct walk {
	struct uw_target *t;
	struct uw_sample *out;
	struct raw_frame *raw; /* the frames of the thread being read, innermost first */
	uint32_t nraw;
	size_t raw_cap;
	struct check *checks;
	uint32_t nchecks;
	size_t checks_cap;
	bool torn; /* the walk failed on values read at different moments, not on garbage */
	bool tore; /* the thread's stack moved under a read this sample (walk_thread_stack) */
	int64_t native_id; /* the kernel's id of the thread being read, as its process knows it; -1 unknown */
	raddr_t top;       /* its innermost frame as its thread state says, when top_known */
	bool top_known;
	unsigned provers;       /* bit i: provers[i] is in use this sample (prover_on) */
	unsigned marker_writes; /* writes of the thread's marker this sample (prove_marker.c) */
	uint64_t kernel_armed;  /* its shot armed as the sample began (prove_kernel.c); 0: none */
	bool kernel_waited;     /* the shot was waited for once */
	bool last_try; /* the last read of a thread that keeps moving: validate_stack judges it */
	bool suspect;  /* the walk saw signs of a torn read: validate_stack judges what held */
	/* 3.15: what frames_collect read of the thread state, in the copy the walk used. */
	raddr_t ts_current, ts_marker;
	uint64_t ts_marker_seq;
	/*
	 * 3.15: the frame the marker was moved up to before this thread's first
	 * try, after the batch read it (marker_early, prove_marker.c): ts_marker of that
	 * try is older than the write.  0: none.
	 */
	raddr_t marker_early;
	/*
	 * The thread being walked (walk_thread_stack), whose proven frames
	 * below its anchor the walk takes rather than reads (3.15,
	 * frames_take_base).  NULL: every frame is read.
	 */
	const struct thread_cache *tc;
	/*
	 * 3.15: the marker, its sequence and the innermost frame as
	 * validate_stack's re-read found them, the marker read at both its ends
	 * (reread_marker_at: where it lies; 0 when the layout has none), and
	 * whether it stood through it.  A stack that moved under that re-read
	 * is taken up to a marker proven by it, the moment the other stacks of
	 * the same sample are proven at, rather than by reads that follow: the
	 * later a part is proven, the more often the code after it has it.
	 */
	raddr_t reread_marker_at;
	bool reread_marker_read;
	raddr_t reread_current, reread_marker;
	uint64_t reread_marker_seq;
	raddr_t reread_top;       /* the walk's innermost frame, its instruction read in the middle */
	uint64_t reread_top_pos;
	uint64_t deadline_ns; /* CLOCK_MONOTONIC; 0: no bound on this sample */
	uint64_t started_ns;  /* when the bound began to count */
	bool cut;             /* the deadline passed: the walk stops where it is */
	uint32_t until_clock; /* frames walked before the clock is looked at again */
	/* validate.c's working arrays. */
	raddr_t *base;
	size_t base_cap;
	struct check **moved;
	size_t moved_cap;
	struct remote_range *ranges;
	size_t ranges_cap;
	uint8_t *buf;
	size_t buf_cap;
};

/* Memory the caches and ids hold, for the budget. */
size_t walk_cache_bytes(const struct uw_target *t);
/* Frames walked between two looks at the clock: a look costs about what a frame does. */
#define WALK_CLOCK_EVERY 256
/*
 * Whether the sample ran past its deadline (w->cut from then on); frames
 * say how much was walked since the last call, so the clock is read only
 * every few hundred frames.  Inline: walk.c and frames.c both ask it, and
 * neither is the other's helper.
 */
static inline bool walk_over_time(struct walk *w, uint32_t frames)
{
	if (w->cut)
		return true;
	if (!w->deadline_ns)
		return false;
	if (frames < w->until_clock) {
		w->until_clock -= frames;
		return false;
	}
	w->until_clock = WALK_CLOCK_EVERY;
	w->cut = clock_mono_ns() > w->deadline_ns;
	return w->cut;
}
/* The arrays a sample works in, kept between samples. */
void walk_free(struct uw_target *t);
/* Bytes they hold. */
size_t walk_room(const struct uw_target *t);

/* frames.c */
/* 3.11+: a frame owned by C (or by the interpreter, 3.14+): the eval loop was entered from C there. */
static inline bool frames_is_shim(const struct py_layout *L, uint8_t owner)
{
	return (L->frame.owner_cstack != LAYOUT_OWNER_NONE && owner == L->frame.owner_cstack) ||
	       (L->frame.owner_interpreter != LAYOUT_OWNER_NONE && owner == L->frame.owner_interpreter);
}
/*
 * 3.11+: whether a frame without a caller can be where a thread's stack
 * begins.  Every stack begins where C entered the eval loop: 3.11 marks
 * that frame is_entry, 3.12+ push a shim frame below it.  A Python frame
 * with no caller and no such mark was read before its link was written
 * (frames_being_called): alone, it is a stack the thread never had (a lone
 * <genexpr> on 3.11, about 1 run in 5 of the impossible-callers test).
 */
static inline bool frames_may_be_root(const struct py_layout *L, uint8_t owner, bool entry)
{
	if (frames_is_shim(L, owner))
		return true;
	if (L->frame.is_entry != LAYOUT_ABSENT)
		return entry;
	return L->frame.owner_cstack == LAYOUT_OWNER_NONE && L->frame.owner_interpreter == LAYOUT_OWNER_NONE;
}
/*
 * 3.11-3.12: whether a thread's innermost frame is one its caller may still
 * be calling: it has not run its first instruction (it points at the one
 * before), and it was not entered from C (3.11 marks those; 3.12 links
 * them through a shim).  An inline call stores the pointer to the new
 * frame before the new frame's link back (GCC orders the two so: seen in
 * the eval loops of 3.11.7 and 3.12.1), and until then the link is what
 * the data stack held there: a stale frame, or none (a lone <genexpr> on
 * 3.11, about 1 run in 5 of the impossible-callers test; or a caller of
 * another thread's).  Its caller is the frame that ends where it begins
 * (frames_called_from), which no stale link points to but by chance of the
 * same place.  (3.13+ point at the first instruction until it is done, and
 * a thread waits there for the GIL: no mark of a call under way.)
 */
static inline bool frames_being_called(const struct py_layout *L, raddr_t code, uint64_t pos, bool entry)
{
	bool inline_call = L->frame.is_entry != LAYOUT_ABSENT ? !entry : L->minor == 12;
	return inline_call && L->code.code_adaptive != LAYOUT_ABSENT && code &&
	       pos + 2 == code + L->code.code_adaptive;
}
/* Whether the frame at caller, of code caller_code, ends on the data stack where callee begins. */
bool frames_called_from(struct uw_target *t, raddr_t caller, raddr_t caller_code, raddr_t callee);
/* The index of the thread's bytecode copy a frame runs (free-threaded builds; else 0). */
static inline uint32_t frames_tlbc(const struct py_layout *L, const uint8_t *frame)
{
	if (L->frame.tlbc_index == LAYOUT_ABSENT)
		return 0;
	int32_t index = load_i32(frame, L->frame.tlbc_index);
	return index > 0 ? (uint32_t)index : 0;
}
/* Read one thread's innermost-frame pointer and its frames onto w->raw (*n of them), with checks. */
int frames_collect(struct walk *w, raddr_t tstate, uint32_t *n, bool *truncated,
                   struct uw_error *err);

/* validate.c */
/* Remember that the walk used len bytes at addr (seen: what it read there). */
int validate_watch(struct walk *w, raddr_t addr, const uint8_t *seen, uint32_t len,
                   enum check_role role, raddr_t frame, struct uw_error *err);
/* The links of frame f at addr (its code and its caller) as windows to check. */
int validate_watch_links(struct walk *w, raddr_t addr, const uint8_t *f, bool with_code,
                         bool caller, struct uw_error *err);
/*
 * Read the windows of one thread's walk again and compare: 0 if all held,
 * 1 if the stack moved under the walk, -1 if it could not be read again.
 * 2 if the thread returned into a frame of the walk and a re-read of the
 * frames from there down proved that stack: *returned innermost frames are
 * left out, and the frame returned into has the instruction read then.
 */
int validate_stack(struct walk *w, uint32_t first, uint32_t nraw, uint32_t common,
                   uint32_t *returned, struct uw_error *err);

/*
 * 3.15, after validate_stack found the stack moved: whether the re-read,
 * with the marker standing through it, proved the frames from the walk's
 * at-th down, and *pos the marked frame's instruction then.
 */
bool validate_below_marker(const struct walk *w, uint32_t first, uint32_t nraw, uint32_t at,
                           uint64_t *pos);

/* chain.c */
/* How many frames, from the bottom, a chain shares with the thread's last sample. */
uint32_t chain_common(const struct uw_target *t, const struct thread_cache *tc,
                      const struct raw_frame *raw, uint32_t n);
/* The stack id of a chain read innermost first; INTERN_FAILED and *err. */
uint32_t chain_resolve(struct uw_target *t, struct thread_cache *tc, const struct raw_frame *raw,
                       uint32_t n, uint32_t common, struct uw_error *err);

/* exception.c */
/* Whether the thread at tstate handles an exception (UW_MODE_EXCEPTION); false if unknown.  *items: the items of its chain read. */
bool exception_handling(struct uw_target *t, raddr_t tstate, uint32_t *items);

/* tasks.c */
/* Whether a sample reads the tasks (async mode, or a snapshot's UW_SNAP_TASKS). */
bool tasks_wanted(const struct uw_target *t);
/*
 * Read the asyncio tasks after the threads: the sample's stacks become task
 * stacks as the async mode says.  A program whose tasks cannot be read keeps
 * its threads' stacks (sample.tasks_error says why); -1 only out of memory.
 */
int tasks_sample(struct walk *w, struct uw_error *err);
/* The last sample's tasks, spelled out into a snapshot. */
int tasks_snapshot(struct uw_target *t, struct uw_snapshot *out, struct uw_error *err);
void tasks_free(struct uw_target *t);

/* threads.c */
void threads_free(struct uw_target *t);
/* The id /proc gives the thread the process knows as tid (another in a pid namespace); -1 none. */
int64_t threads_proc_tid(struct uw_target *t, int64_t tid);
/* End the thread's watch by the in-kernel reader, if any. */
void threads_unwatch(struct uw_target *t, struct thread_cache *tc);
/* The cache of a thread state; threads come in the same order every sample, so hint nearly always hits. */
struct thread_cache *threads_lookup(struct uw_target *t, raddr_t tstate, uint32_t hint,
                                    struct uw_error *err);
/* Forget the threads that were not in this sample: they ended. */
void threads_sweep(struct uw_target *t);
size_t threads_bytes(const struct uw_target *t);
/* Is tid (as the process knows it) one of the process's tasks?  Unknown ids (<= 0) pass. */
bool threads_own(struct uw_target *t, struct thread_cache *tc, int64_t tid);
/* The kernel's state letter of a thread ('R', 'S', ...; '?' unknown). */
char threads_kernel_state(struct uw_target *t, struct thread_cache *tc, int64_t tid);
/* Samples between two reads of a thread's name in /proc. */
#define THREADS_NAME_REFRESH 500
/* Between two looks at a thread's Python name. */
#define THREADS_PYNAME_REFRESH_NS 3000000000ull
/* Between two whole lookups of a name found (the looks between check it where it lies). */
#define THREADS_PYNAME_WHOLE_NS 30000000000ull
/* The first wait before a name not found is looked for again; it doubles up to THREADS_PYNAME_REFRESH_NS. */
#define THREADS_PYNAME_RETRY_NS 50000000ull
/* Python names looked up in one sample at most: a burst of new threads is named over a few. */
#define THREADS_PYNAMES_PER_SAMPLE 4u
/* The thread's name into out, read again when due (see uw_sample_thread.name). */
void threads_name(struct uw_target *t, struct thread_cache *tc, int64_t tid, uint64_t ident,
                  char out[UW_THREAD_NAME_LEN]);

/* pyobj.c: Python objects read from outside, each check and bound its own (see there). */
/* Bytes of one dict entry at most. */
#define PYOBJ_ENTRY_MAX 32u
/* One dict's keys as read: where its entries are and how they are laid out. */
struct pyobj_keys {
	uint64_t slots;      /* index slots, a power of two */
	uint64_t nentries;
	unsigned index_width; /* bytes of one index */
	raddr_t indices, entries;
	uint32_t entry_size;
	bool has_hash;       /* entries begin with the key's hash (general keys) */
	uint32_t key_at, value_at;
};
/*
 * len bytes at addr: read now, outside the sample's batch, or through the
 * sample's view while t->pyobj_batched; -1 for address 0 or a failed read.
 */
int pyobj_read(struct uw_target *t, raddr_t addr, void *buf, size_t len);
/*
 * The same of fields an object keeps while it lives (a type's flags,
 * sizes and offsets, a ContextVar's name): a context's proof does not
 * read them again; what points to the object is read again.
 */
int pyobj_read_fixed(struct uw_target *t, raddr_t addr, void *buf, size_t len);
/* A read noted into t->notes (pyobj_read notes its own while they are set). */
void pyobj_note(struct uw_target *t, raddr_t addr, const uint8_t *bytes, size_t len);
/*
 * Every read noted made again, in one batch, those from lead_from on both
 * first and last: true when each holds the bytes it held.
 */
bool pyobj_notes_hold(struct uw_target *t, struct pyobj_notes *p, uint32_t lead_from);
/* How much longer a free-threaded build's object header is than the usual 16 bytes. */
uint32_t pyobj_shift(const struct uw_target *t);
/* The pointer at addr, the type of obj; 0 when unreadable. */
raddr_t pyobj_pointer(struct uw_target *t, raddr_t addr);
raddr_t pyobj_type_of(struct uw_target *t, raddr_t obj);
/* The runtime's dict, int, tuple and ContextVar types (t->objtypes), looked up once; false without dict and int. */
bool pyobj_types(struct uw_target *t);
/* Whether type is base, or a subclass of it by its flag (one read of the type's flags). */
bool pyobj_is_a(struct uw_target *t, const struct names_layout *N, raddr_t type, raddr_t base,
                uint64_t subclass_flag);
/* A keys object's layout, checked to be one the interpreter could have made.  0, or -1. */
int pyobj_keys_read(struct uw_target *t, const struct names_layout *N, raddr_t keys, struct pyobj_keys *k);
/* Whether the object at addr is the str name (or, with prefix, begins with it): compact ASCII alone. */
bool pyobj_str_is(struct uw_target *t, raddr_t addr, const char *name, bool prefix);
/*
 * The entry of str key name (a prefix of it, with prefix) among a keys
 * object's first entries: 1 and its index, value (0 in a split table,
 * whose values lie apart) and where the value lies, 0 when not there, -1
 * when unreadable.  *known is the key's address when already met
 * (identifiers are interned: one object), which spares a read of each key;
 * it is set when met (not for a prefix).
 */
int pyobj_keys_find(struct uw_target *t, const struct pyobj_keys *k, const char *name, bool prefix,
                    raddr_t *known, uint64_t *index, raddr_t *value, raddr_t *slot);
/* The value of str key name in a dict or a dict's subclass: as pyobj_keys_find, split tables too. */
int pyobj_dict_get(struct uw_target *t, const struct names_layout *N, raddr_t dict, const char *name,
                   bool prefix, raddr_t *known, raddr_t *value, raddr_t *slot);
/* One signed index of a dict's index table.  0, or -1. */
int pyobj_index_read(struct uw_target *t, const struct pyobj_keys *k, uint64_t slot, int64_t *ix);
/* Whether the object at addr is the int v (v >= 0). */
bool pyobj_int_is(struct uw_target *t, const struct names_layout *N, raddr_t addr, uint64_t v);
/*
 * A non-negative int (or an int subclass's) into width bytes (at most 16),
 * big-endian: 1; 0 when it is no int, negative or wider; -1 when unreadable.
 */
int pyobj_int_read(struct uw_target *t, const struct names_layout *N, raddr_t addr, uint8_t *be, size_t width);
/* Item i of a tuple (or a tuple subclass's), 0 when none or unreadable. */
raddr_t pyobj_tuple_item(struct uw_target *t, const struct names_layout *N, raddr_t tuple, uint32_t i);
/*
 * Where an instance keeps its attributes: its dict (1, *dict), or a values
 * array and the keys naming it (2, *values and *keys, *capacity the slots
 * it has); -1 when unreadable.
 */
int pyobj_attrs(struct uw_target *t, const struct names_layout *N, raddr_t obj, raddr_t *dict,
                raddr_t *values, raddr_t *keys, uint64_t *capacity);
/* Attribute name of an instance (by its dict or its values): as pyobj_dict_get. */
int pyobj_attr_get(struct uw_target *t, const struct names_layout *N, raddr_t obj, const char *name,
                   raddr_t *known, raddr_t *value, raddr_t *slot);

/* context.c */
/*
 * The request context of the thread at tstate (uw_options.context_*): its
 * OpenTelemetry span and labels, NULL when none or off.  Kept in tc while
 * the thread's context pointer and version stand.
 */
struct context_seen {
	raddr_t ctx, vars;
	uint64_t ver;
};
/* Before the thread's stack is read: its context pointer, version and variables then.  False when none. */
bool context_before(struct uw_target *t, struct thread_cache *tc, raddr_t tstate, struct context_seen *seen);
/* After: what the context says, when it is still the one seen before (else NULL, never a guess). */
const struct uw_context *context_of_thread(struct uw_target *t, struct thread_cache *tc, raddr_t tstate,
                                           uint64_t thread_id, const struct context_seen *seen);
/* A parked asyncio task's context (its task_context), read once a sample; NULL when none. */
const struct uw_context *context_of_task(struct uw_target *t, raddr_t ctx);
void context_free(struct uw_target *t);

/*
 * value (len bytes: cut at a whole UTF-8 character, control bytes made '?')
 * as label index of out: in place of the one it has when replace, else
 * only when it has none.  A full out takes no more.
 */
void context_label_put(struct uw_context *out, uint32_t index, const char *value, size_t len, bool replace);

/* otel.c */
/* Whether the thread records are read: their key map given and the variable found (looked for again, spaced). */
bool otel_records_on(struct uw_target *t);
/*
 * The record of the thread whose thread pointer is tp (pthread_self()):
 * its span (when context_otel) and the labels its keys name, added to
 * out, its reads through pyobj_read.  0 (a record or none), -1 unreadable.
 */
int otel_thread_record(struct uw_target *t, uint64_t tp, struct uw_context *out);
void otel_configured(struct uw_target *t);
void otel_free(struct uw_target *t);
/* After uw_configure: names that changed make every kept context stale. */
void context_configured(struct uw_target *t, const struct uw_options *old);

/* pynames.c */
/* Thread.name of the thread ident, from threading._active: 1, out and *seen, 0 when not found. */
int pynames_lookup(struct uw_target *t, uint64_t ident, char out[UW_THREAD_NAME_LEN],
                   struct pyname_seen *seen);
/*
 * Whether the name found is still the thread's: its pointer where it was,
 * to the same str (alive, since it is pointed to, and immutable).  One
 * small read.
 */
bool pynames_same(struct uw_target *t, const struct pyname_seen *seen);
/*
 * Samples an idle verdict holds for a thread whose stack stays as it was:
 * half a second at 100 Hz.  A waiting thread that starts running Python
 * changes its stack and counts as busy at once; only one that goes on in C
 * without the GIL at the very same line waits that long to be seen so.
 */
#define THREADS_IDLE_REFRESH 50
/*
 * Whether a thread waits (uw_sample_thread.idle), its stack known: state is
 * its kernel state when the sample read it already, else '?'.
 */
bool threads_idle(struct uw_target *t, struct thread_cache *tc, int64_t tid, bool holds_gil,
                  char state, uint32_t stack);
/* The kernel's id of a thread from its pthread_t (3.8-3.10); 0 a thread that no longer runs; -1 unknown. */
int64_t threads_native_tid(struct uw_target *t, uint64_t pthread);
/*
 * Pages a thread's walk reads before the kernel's proof pays: a sample it
 * proves reads schedstat, about what three or four pages pinned cost (the
 * wchan read that arms it again after the thread ran costs twice that).
 */
#define THREADS_STILL_MIN_PAGES 4
/* Most samples a thread seen on a CPU goes without a look at its wchan: busy threads pay little for it. */
#define THREADS_STILL_BACKOFF_MAX 32
/* Before a sample's memory is read: whether each thread worth it stood still since last read. */
/* End the thread's proof: its /proc files closed, the look's word on it forgotten. */
void threads_still_end(struct uw_target *t, struct thread_cache *tc);
void threads_still_begin(struct uw_target *t);
/*
 * The stack a thread had when it was last read, when the kernel proves it
 * ran nothing since (tid its thread id this sample, top its innermost frame
 * pointer): true and *stack, *truncated.
 */
bool threads_still_stack(struct uw_target *t, struct thread_cache *tc, int64_t tid, raddr_t top,
                         uint32_t *stack, bool *truncated);
/* After a whole walk of a thread (pages: what it read): keep its stack for the proof. */
void threads_still_after(struct uw_target *t, struct thread_cache *tc, int64_t tid, raddr_t top,
                         uint32_t stack, bool truncated, uint32_t pages);

#endif
