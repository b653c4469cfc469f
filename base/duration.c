/* The one grammar of a duration (duration.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"

int duration_parse(const char *text, double min, double max, double *out)
{
	static const struct {
		const char *unit;
		double seconds;
	} units[] = {{"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}, {"", 1}};
	/* Decimal digits and a point alone: strtod would also take signs, spaces, hex, exponents, "inf". */
	size_t digits = strspn(text, "0123456789.");
	if (*text < '0' || *text > '9')
		return -1;
	char *end;
	errno = 0;
	double v = strtod(text, &end);
	if (errno || end != text + digits)
		return -1;
	while (*end == ' ')
		end++;
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
		if (strcmp(end, units[i].unit) == 0) {
			double seconds = v * units[i].seconds;
			if (!(seconds >= min && seconds <= max))
				return -1;
			*out = seconds;
			return 0;
		}
	return -1;
}
