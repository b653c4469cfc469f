/*
 * A profile: sample counts by stack, as the sampler's stack ids while their
 * epoch lasts, spelled out as text when the epoch ends or the profile is
 * written.  Counting a sample is an array increment per thread.
 */
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"

void profile_init(struct profile *p)
{
	memset(p, 0, sizeof *p);
}

void profile_free(struct profile *p)
{
	for (size_t i = 0; i < p->nlines; i++)
		free(p->lines[i].text);
	free(p->lines);
	free(p->counts);
	memset(p, 0, sizeof *p);
}

int profile_add(struct profile *p, const struct uw_sample *s)
{
	if (p->counts_epoch != s->epoch && p->touched)
		return -1; /* the caller must profile_settle() before a new epoch */
	p->counts_epoch = s->epoch;
	for (uint32_t i = 0; i < s->nthreads; i++) {
		if (s->threads[i].moving)
			continue; /* no stack was read: counting it would invent one */
		uint32_t stack = s->threads[i].stack;
		if (stack >= p->counts_cap) {
			uint32_t ncap = p->counts_cap ? p->counts_cap : 1024;
			while (ncap <= stack)
				ncap *= 2;
			uint64_t *n = realloc(p->counts, ncap * sizeof *n);
			if (!n)
				return -1;
			memset(n + p->counts_cap, 0, (ncap - p->counts_cap) * sizeof *n);
			p->counts = n;
			p->counts_cap = ncap;
		}
		p->counts[stack]++;
		p->touched = true;
		p->total++;
	}
	return 0;
}

/* Appends "function (file:line)" for one frame. */
static int frame_text(const struct uw_frame *f, char **buf, size_t *len, size_t *cap)
{
	char tmp[64];
	const char *parts[4] = {f->function, NULL, NULL, NULL};
	if (f->kind == UW_FRAME_PYTHON) {
		parts[1] = " (";
		parts[2] = f->file ? f->file : "?";
		if (f->line >= 0)
			snprintf(tmp, sizeof tmp, ":%d)", f->line);
		else
			snprintf(tmp, sizeof tmp, ")");
		parts[3] = tmp;
	}
	for (int i = 0; i < 4; i++) {
		if (!parts[i])
			continue;
		size_t n = strlen(parts[i]);
		if (*len + n + 2 > *cap) {
			size_t ncap = (*cap ? *cap * 2 : 256) + n;
			char *nb = realloc(*buf, ncap);
			if (!nb)
				return -1;
			*buf = nb;
			*cap = ncap;
		}
		memcpy(*buf + *len, parts[i], n);
		*len += n;
	}
	return 0;
}

/* The collapsed-stack text of a stack id: root first, ';' between frames. */
static char *stack_text(const struct uw_target *t, uint32_t stack)
{
	uint32_t depth = uw_stack_depth(t, stack), n = 0;
	uint32_t *frames = malloc((depth ? depth : 1) * sizeof *frames);
	if (!frames)
		return NULL;
	for (uint32_t s = stack; s && n < depth; s = uw_stack_parent(t, s))
		frames[n++] = uw_stack_frame(t, s);
	char *buf = NULL;
	size_t len = 0, cap = 0;
	for (uint32_t i = n; i-- > 0;) {
		if (frame_text(uw_frame_get(t, frames[i]), &buf, &len, &cap) != 0) {
			free(buf);
			free(frames);
			return NULL;
		}
		if (i > 0)
			buf[len++] = ';';
	}
	free(frames);
	if (!buf)
		return strdup("<empty>");
	buf[len] = '\0';
	return buf;
}

int profile_settle(struct profile *p, const struct uw_target *t)
{
	for (uint32_t stack = 0; stack < p->counts_cap; stack++) {
		if (!p->counts[stack])
			continue;
		if (p->nlines == p->lines_cap) {
			size_t ncap = p->lines_cap ? p->lines_cap * 2 : 256;
			struct profile_line *n = realloc(p->lines, ncap * sizeof *n);
			if (!n)
				return -1;
			p->lines = n;
			p->lines_cap = ncap;
		}
		char *text = stack_text(t, stack);
		if (!text)
			return -1;
		p->lines[p->nlines++] = (struct profile_line){.text = text, .count = p->counts[stack]};
		p->counts[stack] = 0;
	}
	p->touched = false;
	return 0;
}

static int line_cmp(const void *a, const void *b)
{
	return strcmp(((const struct profile_line *)a)->text, ((const struct profile_line *)b)->text);
}

int profile_write_collapsed(struct profile *p, const struct uw_target *t, FILE *out)
{
	if (profile_settle(p, t) != 0)
		return -1;
	if (p->nlines > 1) /* none: there may be no array at all */
		qsort(p->lines, p->nlines, sizeof *p->lines, line_cmp);
	/* The same stack text can come from two epochs: merge equal neighbours. */
	for (size_t i = 0; i < p->nlines;) {
		uint64_t count = p->lines[i].count;
		size_t j = i + 1;
		while (j < p->nlines && strcmp(p->lines[j].text, p->lines[i].text) == 0)
			count += p->lines[j++].count;
		if (fprintf(out, "%s %llu\n", p->lines[i].text, (unsigned long long)count) < 0)
			return -1;
		i = j;
	}
	return fflush(out) == 0 ? 0 : -1;
}
