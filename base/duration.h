/*
 * The one grammar of a duration, for the daemon's configuration and for
 * pyprofd-ctl's options alike: a number, then optionally spaces and a unit
 * ("500ms", "15s", "2m", "1h", "1d"); a bare number is seconds.
 */
#ifndef PYPROFD_DURATION_H
#define PYPROFD_DURATION_H

/* The seconds text means, in [min, max]; 0, or -1 when it is no duration or out of bounds. */
int duration_parse(const char *text, double min, double max, double *out);

#endif
