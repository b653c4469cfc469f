/*
 * What the daemon tells systemd (Type=notify): that it is ready, reloads or
 * stops, and a line of what it does.  Outside systemd each is a no-op.
 */
#include <systemd/sd-daemon.h>

#include "pyprofd.h"

void notify_ready(const struct server *s)
{
	sd_notify(0, "READY=1");
	notify_status(s);
}

void notify_reloading(void)
{
	sd_notify(0, "RELOADING=1");
}

void notify_stopping(void)
{
	sd_notify(0, "STOPPING=1");
}

void notify_status(const struct server *s)
{
	unsigned sampling = 0, warm = 0;
	for (size_t i = 0; i < s->targets.n; i++) {
		sampling += s->targets.v[i]->state == TARGET_SAMPLING;
		warm += s->targets.v[i]->state == TARGET_DETACHED;
	}
	sd_notifyf(0, "STATUS=sampling %u target%s, %u kept warm, %u client%s", sampling,
	           sampling == 1 ? "" : "s", warm, s->nclients, s->nclients == 1 ? "" : "s");
}
