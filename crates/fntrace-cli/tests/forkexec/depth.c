/* --depth across fork (tests/forkexec.rs): main calls work() (which
 * calls leaf() n times), then forks children that call work() 10 times
 * each; every call of leaf() is at depth 2 (main -> work -> leaf). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/wait.h>
static long ncalls_leaf, ncalls_work;
__attribute__((noinline)) long leaf(long x){ ncalls_leaf++; return x*3+1; }
__attribute__((noinline)) long work(int n){ ncalls_work++; long s=0; for(int i=0;i<n;i++) s+=leaf(i); return s; }
int main(int argc,char**argv){
  int nch = argc>1?atoi(argv[1]):3;
  long s = work(100);
  for(int c=0;c<nch;c++){
    pid_t p=fork();
    if(p==0){ long t=0; for(int k=0;k<10;k++) t+=work(50+c);
      printf("child %d sum %ld leaf %ld work %ld\n", c, t, ncalls_leaf, ncalls_work); fflush(stdout);
      exit(c); }
    int st; waitpid(p,&st,0);
    printf("parent: child %d exited %d\n", c, WEXITSTATUS(st));
  }
  s+=work(10);
  printf("parent sum %ld leaf %ld work %ld\n", s, ncalls_leaf, ncalls_work);
  return 0;
}
