export class HealthDto {
  /** "ok" while the process serves requests from a current view of the store. */
  status!: string;
}
