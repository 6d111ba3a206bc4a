/* hello.c: the smallest C function. */
#include <stdio.h>

int main(void) {
    printf("Content-Type: text/plain\n\nhello from C\n");
    return 0;
}
