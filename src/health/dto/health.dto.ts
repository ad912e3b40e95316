export class HealthDto {
  /** Always "ok" while the process serves requests. */
  status!: string;
}
