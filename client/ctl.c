/* pyprofd-ctl: placeholder until the client lands. */
#include <stdio.h>

int main(void)
{
	fputs("pyprofd-ctl: not built yet\n", stderr);
	return 1;
}
