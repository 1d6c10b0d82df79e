/* A stand-in for Windows' bcryptprimitives.dll, which Wine 8 (Debian 12)
 * lacks: Rust's std (1.78 and later) imports ProcessPrng from it for its
 * random seeds, so no Rust test executable starts under that Wine without
 * it. Built by scripts/stages/65-wine.sh with the mingw cross compiler and
 * put in the Wine prefix's system32. ProcessPrng is answered by
 * RtlGenRandom (advapi32's SystemFunction036), which Wine has. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG chunk = length > 0x40000000 ? 0x40000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk)) {
            return FALSE;
        }
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
